"""The training kernels: a short TensorFlow or PyTorch epoch per transport (``tf_epoch.py``,
``torch_epoch.py``) on the loop they share (``loop.py``), their real-data input (``input_files.py``
and each framework's feed), how much of each collective a step waited for (``exposure.py``) and
the accelerators' peak FLOP/s for MFU (``peaks.py``). The models live in ``kernels/models``."""
