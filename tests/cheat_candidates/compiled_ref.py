"""torch.compile of the reference: PyTorch computes the result (the eager backend keeps the test fast;
any backend goes through the same dynamo frames)."""
import torch

_f = torch.compile(lambda x: torch.softmax(x.float(), dim=-1).to(x.dtype), backend="eager")


def kernel_fn(x):
    return _f(x)
