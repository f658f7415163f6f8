// The runtime's routing of torch's product functions, for calls the default keeps.
//
// A routed function (torch.mm, torch.bmm, torch.matmul, torch.addmm, F.linear) is a builtin
// made here. A call whose problem is known to keep the default (the runtime's `fast` table,
// keyed by the bytes of dtype, device, TF32, shapes and strides) counts itself and runs
// torch's own function, reading the tensors in C++ (tens of ns) instead of through their
// Python accessors (about 1 µs a call on a slow host). Every other call, and every call that
// this file does not model (keywords, subclasses, grad, sparse or wrapped tensors, other
// devices), goes to the Python routing function, which decides, dispatches winners and, for
// a call the default keeps, puts its key into the table (`remember`).

#include <Python.h>

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace {

enum Kind : int { MM = 0, MATMUL = 1, ADDMM = 2, LINEAR = 3 };

struct Globals {
  PyObject* state = nullptr;  // the routing STATE ("active": the runtime that routes now)
  PyObject* tensor_type = nullptr;
  PyObject* parameter_type = nullptr;
  PyObject* allow_tf32 = nullptr;  // torch._C._get_cublas_allow_tf32
  PyObject* settle = nullptr;      // patching.settle_functions(rt)
  PyObject* s_active = nullptr;
  PyObject* s_fast = nullptr;
  PyObject* s_runner = nullptr;
  PyObject* s_calls = nullptr;
  PyObject* s_quiet_calls = nullptr;
  PyObject* s_settle_at = nullptr;
  PyObject* s_bias = nullptr;
  PyObject* s_held = nullptr;
  PyObject* s_run = nullptr;
  PyObject* s_checks_left = nullptr;
  PyObject* s_add_ = nullptr;
};
Globals G;

// The key of the call this thread's Python routing is deciding, and its runtime (identity
// only): per thread, as another thread may route while this one waits in torch.
thread_local PyObject* pending = nullptr;
thread_local PyObject* pending_rt = nullptr;

// What a routed function holds: its kind, torch's own function and the Python routing one.
struct Router {
  PyObject_HEAD
  int kind;
  int ident;  // which function: part of every key
  PyObject* original;
  PyObject* slow;
};

void router_dealloc(PyObject* self) {
  auto* r = reinterpret_cast<Router*>(self);
  Py_XDECREF(r->original);
  Py_XDECREF(r->slow);
  Py_TYPE(self)->tp_free(self);
}

PyTypeObject RouterType = {PyVarObject_HEAD_INIT(nullptr, 0)};

inline bool plain(PyObject* o) {
  auto* t = reinterpret_cast<PyObject*>(Py_TYPE(o));
  return t == G.tensor_type || t == G.parameter_type;
}

constexpr int kMaxWords = 48;

struct Key {
  int64_t words[kMaxWords];
  int n = 0;
  bool ok = true;
  void put(int64_t x) {
    if (n < kMaxWords) {
      words[n++] = x;
    } else {
      ok = false;
    }
  }
  void tensor(const at::Tensor& t) {
    auto sizes = t.sizes();
    auto strides = t.strides();
    put(static_cast<int64_t>(sizes.size()));
    for (auto s : sizes) put(s);
    for (auto s : strides) put(s);
  }
};

// A tensor whose sizes and strides this file may read as they are: dense, on the CPU or
// a CUDA device, not wrapped by functorch, functionalization or a Python subclass.
bool readable(const at::Tensor& t) {
  if (t.layout() != c10::kStrided) return false;
  auto type = t.device().type();
  if (type != c10::DeviceType::CPU && type != c10::DeviceType::CUDA) return false;
  constexpr c10::DispatchKeySet wrapped({
      c10::DispatchKey::FuncTorchBatched,
      c10::DispatchKey::FuncTorchGradWrapper,
      c10::DispatchKey::Python,
      c10::DispatchKey::Functionalize,
      c10::DispatchKey::BatchedNestedTensor,
  });
  return !t.key_set().has_any(wrapped);
}

// Add one to an int attribute; return its new value (-2 on error, with the error set).
long long increment(PyObject* obj, PyObject* name) {
  PyObject* value = PyObject_GetAttr(obj, name);
  if (value == nullptr) return -2;
  long long next = PyLong_AsLongLong(value) + 1;
  Py_DECREF(value);
  if (next == 0 && PyErr_Occurred()) return -2;
  PyObject* boxed = PyLong_FromLongLong(next);
  if (boxed == nullptr) return -2;
  int rc = PyObject_SetAttr(obj, name, boxed);
  Py_DECREF(boxed);
  return rc < 0 ? -2 : next;
}

PyObject* slow_call(Router* r, PyObject* rt, PyObject* key, PyObject* const* args,
                    Py_ssize_t nargs, PyObject* kwnames) {
  // `key` (owned, may be null) is what `remember` files the decided route under.
  PyObject* saved_key = pending;
  PyObject* saved_rt = pending_rt;
  pending = key;
  pending_rt = rt;
  PyObject* out = PyObject_Vectorcall(r->slow, args, nargs, kwnames);
  Py_XDECREF(pending);
  pending = saved_key;
  pending_rt = saved_rt;
  return out;
}

// F.linear's hit, as `patching.linear_with` makes it: [.., K] @ W^T as one product of all
// leading rows through `Runtime.run`, then the bias added in place and the shape restored.
PyObject* linear_hit(PyObject* rt, PyObject* route, PyObject* input_obj, PyObject* weight_obj,
                     PyObject* bias_obj) {
  PyObject* a_obj = nullptr;
  PyObject* wt_obj = nullptr;
  std::vector<int64_t> shape;
  try {
    const at::Tensor& input = THPVariable_Unpack(input_obj);
    const at::Tensor& weight = THPVariable_Unpack(weight_obj);
    if (input.dim() != 2) {
      auto sizes = input.sizes();
      shape.assign(sizes.begin(), sizes.end() - 1);
      shape.push_back(weight.size(0));
      a_obj = THPVariable_Wrap(input.reshape({-1, input.size(-1)}));
    } else {
      Py_INCREF(input_obj);
      a_obj = input_obj;
    }
    wt_obj = THPVariable_Wrap(weight.t());
  } catch (const std::exception& exc) {
    Py_XDECREF(a_obj);
    PyErr_SetString(PyExc_RuntimeError, exc.what());
    return nullptr;
  }
  if (a_obj == nullptr || wt_obj == nullptr) {
    Py_XDECREF(a_obj);
    Py_XDECREF(wt_obj);
    return nullptr;
  }
  Py_INCREF(rt);
  PyObject* call[4] = {rt, route, a_obj, wt_obj};
  PyObject* out = PyObject_VectorcallMethod(G.s_run, call, 4, nullptr);
  Py_DECREF(rt);
  Py_DECREF(a_obj);
  Py_DECREF(wt_obj);
  if (out == nullptr) return nullptr;
  if (bias_obj == nullptr && shape.empty()) return out;
  if (!plain(out)) {  // what a runner returned: let Python's operators handle it
    PyObject* added = out;
    if (bias_obj != nullptr) {
      added = PyObject_CallMethodOneArg(out, G.s_add_, bias_obj);
      Py_DECREF(out);
      if (added == nullptr) return nullptr;
    }
    if (shape.empty()) return added;
    PyErr_SetString(PyExc_TypeError, "a runner returned a non-tensor for a batched F.linear");
    Py_DECREF(added);
    return nullptr;
  }
  try {
    at::Tensor result = THPVariable_Unpack(out);
    if (bias_obj != nullptr) result.add_(THPVariable_Unpack(bias_obj));
    if (shape.empty()) return out;
    Py_DECREF(out);
    return THPVariable_Wrap(result.view(shape));
  } catch (const std::exception& exc) {
    Py_DECREF(out);
    PyErr_SetString(PyExc_RuntimeError, exc.what());
    return nullptr;
  }
}

PyObject* route_call(PyObject* self, PyObject* const* args, Py_ssize_t nargsf,
                     PyObject* kwnames) {
  auto* r = reinterpret_cast<Router*>(self);
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  // Read as an attribute: taking the object's __dict__ would slow every store to it.
  PyObject* rt = PyObject_GetAttr(G.state, G.s_active);
  if (rt == nullptr) return nullptr;
  Py_DECREF(rt);  // borrowed from here on: `patching.RUNTIMES` holds every runtime for good
  if (rt == Py_None) return PyObject_Vectorcall(r->original, args, nargsf, kwnames);

  // Which operands make the key, and what the call's form must be for this path.
  PyObject* a_obj = nullptr;
  PyObject* b_obj = nullptr;
  PyObject* bias = nullptr;  // a tensor whose requires_grad counts, or null
  int bias_flag = 0;
  Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  switch (r->kind) {
    case MM:
    case MATMUL:
      if (nargs != 2 || nkw != 0) goto slow_no_key;
      a_obj = args[0];
      b_obj = args[1];
      break;
    case ADDMM:
      if (nargs != 3 || nkw != 0 || !plain(args[0])) goto slow_no_key;
      bias = args[0];
      a_obj = args[1];
      b_obj = args[2];
      break;
    case LINEAR: {
      PyObject* b = nullptr;
      if (nargs == 3 && nkw == 0) {
        b = args[2];
      } else if (nargs == 2 && nkw == 1) {
        PyObject* name = PyTuple_GET_ITEM(kwnames, 0);
        if (name != G.s_bias && PyUnicode_Compare(name, G.s_bias) != 0) goto slow_no_key;
        b = args[2];
      } else if (nargs != 2 || nkw != 0) {
        goto slow_no_key;
      }
      if (b != nullptr && b != Py_None) {
        if (!plain(b)) goto slow_no_key;
        bias = b;
        bias_flag = 1;
      }
      a_obj = args[0];
      b_obj = args[1];
      break;
    }
    default:
      goto slow_no_key;
  }
  if (!plain(a_obj) || !plain(b_obj)) goto slow_no_key;

  {
    Key key;
    try {
      const at::Tensor& a = THPVariable_Unpack(a_obj);
      const at::Tensor& b = THPVariable_Unpack(b_obj);
      if (!a.defined() || !b.defined() || !readable(a) || !readable(b)) goto slow_no_key;
      if (r->kind == LINEAR) {
        if (a.dim() < 1 || b.dim() != 2) {  // F.linear's own business, as in Python
          return PyObject_Vectorcall(r->original, args, nargsf, kwnames);
        }
      } else if (r->kind == MATMUL) {
        if (a.dim() != b.dim() || (a.dim() != 2 && a.dim() != 3)) goto slow_no_key;
      }
      if (at::GradMode::is_enabled()) {
        bool grad = a.requires_grad() || b.requires_grad();
        if (!grad && bias != nullptr) grad = THPVariable_Unpack(bias).requires_grad();
        if (grad) goto slow_no_key;  // autograd routes its backward products: Python's
      }
      bool cuda = a.device().type() == c10::DeviceType::CUDA;
      int64_t tf32 = 0;
      if (cuda && a.scalar_type() == at::kFloat) {
        PyObject* allowed = PyObject_CallNoArgs(G.allow_tf32);
        if (allowed == nullptr) return nullptr;
        tf32 = PyObject_IsTrue(allowed);
        Py_DECREF(allowed);
      }
      key.put(r->ident);
      key.put(static_cast<int64_t>(a.scalar_type()));
      key.put(static_cast<int64_t>(b.scalar_type()));
      key.put(cuda ? a.device().index() : -1);
      key.put(tf32 | (bias_flag << 1));
      key.tensor(a);
      key.tensor(b);
    } catch (const std::exception&) {
      goto slow_no_key;  // symbolic sizes and the like: Python reads them its own way
    }
    if (!key.ok) goto slow_no_key;
    PyObject* kbytes = PyBytes_FromStringAndSize(reinterpret_cast<const char*>(key.words),
                                                 key.n * static_cast<Py_ssize_t>(sizeof(int64_t)));
    if (kbytes == nullptr) return nullptr;
    PyObject* fast = PyObject_GetAttr(rt, G.s_fast);
    if (fast == nullptr || !PyDict_Check(fast)) {
      Py_XDECREF(fast);
      Py_DECREF(kbytes);
      PyErr_Clear();
      return slow_call(r, rt, nullptr, args, nargs, kwnames);
    }
    PyObject* route = PyDict_GetItemWithError(fast, kbytes);  // borrowed
    Py_DECREF(fast);
    if (route == nullptr) {
      if (PyErr_Occurred()) {
        Py_DECREF(kbytes);
        return nullptr;
      }
      return slow_call(r, rt, kbytes, args, nargs, kwnames);  // steals kbytes
    }
    Py_DECREF(kbytes);
    Py_INCREF(route);
    PyObject* runner = PyObject_GetAttr(route, G.s_runner);
    if (runner == nullptr) {
      Py_DECREF(route);
      return nullptr;
    }
    bool quiet = runner == Py_None;
    Py_DECREF(runner);
    if (!quiet && r->kind == ADDMM) {  // addmm's winner: Python's path
      Py_DECREF(route);
      return slow_call(r, rt, nullptr, args, nargs, kwnames);
    }
    if (!quiet && r->kind == LINEAR) {
      // Calls still checked against the default, or timed beside it: Python's path.
      PyObject* checks = PyObject_GetAttr(route, G.s_checks_left);
      int checking = checks == nullptr ? -1 : PyObject_IsTrue(checks);
      Py_XDECREF(checks);
      if (checking != 0) {
        Py_DECREF(route);
        return checking < 0 ? nullptr : slow_call(r, rt, nullptr, args, nargs, kwnames);
      }
    }
    long long ok = increment(route, G.s_calls);
    if (ok == -2) {
      Py_DECREF(route);
      return nullptr;
    }
    if (!quiet) {  // a hit: the runtime runs the winner (checks, faults and all), unless held
      PyObject* held = PyObject_GetAttr(route, G.s_held);
      int is_held = held == nullptr ? -1 : PyObject_IsTrue(held);
      Py_XDECREF(held);
      if (is_held < 0) {
        Py_DECREF(route);
        return nullptr;
      }
      if (is_held) {
        Py_DECREF(route);
        return PyObject_Vectorcall(r->original, args, nargsf, kwnames);
      }
      if (r->kind == LINEAR) {
        PyObject* out = linear_hit(rt, route, a_obj, b_obj, bias);
        Py_DECREF(route);
        return out;
      }
      Py_INCREF(rt);
      PyObject* call[4] = {rt, route, args[0], args[1]};
      PyObject* out = PyObject_VectorcallMethod(G.s_run, call, 4, nullptr);
      Py_DECREF(rt);
      Py_DECREF(route);
      return out;
    }
    Py_DECREF(route);
    Py_INCREF(rt);  // settling may change what STATE holds
    long long quiet_calls = increment(rt, G.s_quiet_calls);
    if (quiet_calls == -2) {
      Py_DECREF(rt);
      return nullptr;
    }
    PyObject* settle_at = PyObject_GetAttr(rt, G.s_settle_at);
    if (settle_at == nullptr) {
      Py_DECREF(rt);
      return nullptr;
    }
    long long at = PyLong_AsLongLong(settle_at);
    Py_DECREF(settle_at);
    if (at == quiet_calls) {
      PyObject* done = PyObject_CallOneArg(G.settle, rt);
      if (done == nullptr) {
        Py_DECREF(rt);
        return nullptr;
      }
      Py_DECREF(done);
    }
    Py_DECREF(rt);
    return PyObject_Vectorcall(r->original, args, nargsf, kwnames);
  }

slow_no_key:
  return slow_call(r, rt, nullptr, args, nargs, kwnames);
}

PyMethodDef kRouteDef = {"route", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(route_call)),
                         METH_FASTCALL | METH_KEYWORDS, nullptr};

// router(kind, ident, name, original, slow) -> a builtin that routes calls as described above.
PyObject* make_router(PyObject*, PyObject* args) {
  int kind;
  int ident;
  const char* name;
  PyObject* original;
  PyObject* slow;
  if (!PyArg_ParseTuple(args, "iisOO", &kind, &ident, &name, &original, &slow)) return nullptr;
  if (kind < MM || kind > LINEAR) {
    PyErr_Format(PyExc_ValueError, "unknown router kind %d", kind);
    return nullptr;
  }
  auto* r = PyObject_New(Router, &RouterType);
  if (r == nullptr) return nullptr;
  r->kind = kind;
  r->ident = ident;
  Py_INCREF(original);
  r->original = original;
  Py_INCREF(slow);
  r->slow = slow;
  // Each router needs its own method definition: a builtin's __name__ is the def's. They
  // live as long as the process (a handful, made once).
  auto* def = new PyMethodDef(kRouteDef);
  def->ml_name = strdup(name);
  PyObject* fn = PyCFunction_NewEx(def, reinterpret_cast<PyObject*>(r), nullptr);
  Py_DECREF(r);
  return fn;
}

// init(state, Tensor, Parameter, allow_tf32, settle): what every call reads.
PyObject* init(PyObject*, PyObject* args) {
  PyObject *state, *tensor, *parameter, *allow_tf32, *settle;
  if (!PyArg_ParseTuple(args, "OOOOO", &state, &tensor, &parameter, &allow_tf32, &settle)) {
    return nullptr;
  }
  Py_INCREF(state);
  Py_XSETREF(G.state, state);
  Py_INCREF(tensor);
  Py_XSETREF(G.tensor_type, tensor);
  Py_INCREF(parameter);
  Py_XSETREF(G.parameter_type, parameter);
  Py_INCREF(allow_tf32);
  Py_XSETREF(G.allow_tf32, allow_tf32);
  Py_INCREF(settle);
  Py_XSETREF(G.settle, settle);
  Py_RETURN_NONE;
}

// remember(rt, route): file the route under the key of the call Python is deciding, if
// that call came through a router of `rt`'s (else nothing).
PyObject* remember(PyObject*, PyObject* args) {
  PyObject *rt, *route;
  if (!PyArg_ParseTuple(args, "OO", &rt, &route)) return nullptr;
  if (pending == nullptr || pending_rt != rt) Py_RETURN_FALSE;
  PyObject* fast = PyObject_GetAttr(rt, G.s_fast);
  if (fast == nullptr) return nullptr;
  int rc = PyDict_Check(fast) ? PyDict_SetItem(fast, pending, route) : 0;
  Py_DECREF(fast);
  if (rc < 0) return nullptr;
  Py_CLEAR(pending);
  pending_rt = nullptr;
  Py_RETURN_TRUE;
}

PyMethodDef kMethods[] = {
    {"init", init, METH_VARARGS, "init(state, Tensor, Parameter, allow_tf32, settle)"},
    {"router", make_router, METH_VARARGS, "router(kind, ident, name, original, slow) -> builtin"},
    {"remember", remember, METH_VARARGS, "remember(rt, route) -> whether it was filed"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "tps_runtime_fastpath", nullptr, -1, kMethods};

}  // namespace

PyMODINIT_FUNC PyInit_tps_runtime_fastpath() {
  RouterType.tp_name = "tps_runtime_fastpath.Router";
  RouterType.tp_basicsize = sizeof(Router);
  RouterType.tp_dealloc = router_dealloc;
  RouterType.tp_flags = Py_TPFLAGS_DEFAULT;
  if (PyType_Ready(&RouterType) < 0) return nullptr;
  G.s_active = PyUnicode_InternFromString("active");
  G.s_fast = PyUnicode_InternFromString("fast");
  G.s_runner = PyUnicode_InternFromString("runner");
  G.s_calls = PyUnicode_InternFromString("calls");
  G.s_quiet_calls = PyUnicode_InternFromString("quiet_calls");
  G.s_settle_at = PyUnicode_InternFromString("settle_at");
  G.s_bias = PyUnicode_InternFromString("bias");
  G.s_held = PyUnicode_InternFromString("held");
  G.s_run = PyUnicode_InternFromString("run");
  G.s_checks_left = PyUnicode_InternFromString("checks_left");
  G.s_add_ = PyUnicode_InternFromString("add_");
  PyObject* module = PyModule_Create(&kModule);
  if (module == nullptr) return nullptr;
  PyModule_AddIntConstant(module, "MM", MM);
  PyModule_AddIntConstant(module, "MATMUL", MATMUL);
  PyModule_AddIntConstant(module, "ADDMM", ADDMM);
  PyModule_AddIntConstant(module, "LINEAR", LINEAR);
  return module;
}
