"""Fixtures the commands share with the model tests: the Kernel Tuner data of the checkout."""

from tests.models.conftest import convolution_runs, kernel_tuner_dir

__all__ = ["convolution_runs", "kernel_tuner_dir"]
