"""PyTorch's transports: ``torch.distributed`` process groups (gloo on host tensors, NCCL on CUDA
tensors, MPI where the installed torch was built with it) for the allreduce kernel and for the
DDP training epochs of ``torch-epoch``. ``support`` imports only the standard library at module
level, so the registry can ask it what runs here without importing torch."""
