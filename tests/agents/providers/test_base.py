"""The kernel a provider prepares, and the rotating kernel of cold-cache timing."""

from tps.candidate import VENDOR_DEFAULT


def test_a_rotating_kernel_runs_each_copy_once_and_closes_them_all():
    from agents.providers.base import Kernel, rotating

    ran, closed = [], []
    kernels = [
        Kernel(
            candidate=VENDOR_DEFAULT,
            run=lambda i=i: ran.append(i) or i,
            close=lambda i=i: closed.append(i),
        )
        for i in range(3)
    ]
    kernel = rotating(kernels)
    assert kernel.run() == 2 and ran == [0, 1, 2] and kernel.launches == 3
    kernel.close()
    assert closed == [0, 1, 2]
