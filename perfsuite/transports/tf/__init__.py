"""TensorFlow's transports: gRPC collectives for the allreduce kernel, and the gradient exchanges
of ``tf-epoch`` (``train.py``, on the GPU ``train_gpu.py``). ``support`` imports only the standard
library at module level, so the registry can ask it what runs here without importing TensorFlow."""
