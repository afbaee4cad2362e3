"""numpy arrays to torch tensors and back, bfloat16 included (ml_dtypes' bfloat16, which torch.from_numpy does not
take, goes through its int16 bits)."""

import ml_dtypes
import numpy as np


def to_torch(array: np.ndarray, device):
    """``array`` as a torch tensor on ``device``, of the same dtype (bfloat16 bit for bit)."""
    import torch

    if array.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(array).to(device)


def to_numpy(tensor) -> np.ndarray:
    """A tensor's values on the host as a numpy array (bfloat16 as ml_dtypes' bfloat16, bit for bit)."""
    import torch

    tensor = tensor.cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()
