"""The probe engine: measure candidate kernels for one problem and pick the fastest correct one."""
