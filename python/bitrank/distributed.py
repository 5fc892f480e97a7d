"""Several processes through torch.distributed (torchrun): the helpers compress_model and
distill use.

One process (no process group initialised, WORLD_SIZE unset or 1) is the plain case:
size() is 1, is_main() is true, and every helper returns at once without touching
torch.distributed, so the single-process code paths are the ones they always were.

Under `torchrun --nproc-per-node N`, init_from_env() starts the process group from
the environment torchrun sets (nccl for CUDA devices, gloo for the CPU) and gives
each process its device (cuda:LOCAL_RANK). The collectives here are written so their
results do not depend on the backend's reduction algorithm:

  - all_reduce_fixed sums by gathering every rank's tensor and adding them in rank
    order 0, 1, …, N-1 on every rank: every rank gets the same bits, and a run gets
    the same bits each time it runs on the same number of processes (a ring or tree
    all-reduce gives no such promise across runs or message sizes);
  - broadcast_tensor / send_tensor move a tensor whose shape only its sender knows
    (a small header first);
  - schedule() assigns work items (linears) to ranks by cost, deterministically.

NCCL moves device tensors only: tensors on the host are staged through the process's
CUDA device and come back to where they were.
"""
import os
import pickle

import torch

try:
    import torch.distributed as dist
except ImportError:  # a torch built without distributed support
    dist = None


class DistributedError(ValueError):
    """A setting that cannot run on several processes, in one line."""


# ----------------------------------------------------------------- who we are

def active():
    """Whether a process group of more than one process is initialised."""
    return (dist is not None and dist.is_available() and dist.is_initialized()
            and dist.get_world_size() > 1)


def size():
    return dist.get_world_size() if active() else 1


def rank():
    return dist.get_rank() if active() else 0


def is_main():
    return rank() == 0


def env_world_size():
    """WORLD_SIZE as torchrun sets it (1 when unset)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise DistributedError(f"WORLD_SIZE={os.environ['WORLD_SIZE']!r} is not an integer") \
            from None


def init_from_env(device="auto"):
    """Under torchrun (WORLD_SIZE > 1) start the default process group from the
    environment, if it is not started yet: backend nccl when `device` names CUDA
    ("cuda", "auto" with a GPU), gloo for "cpu". Returns the device this process
    works on: cuda:LOCAL_RANK for CUDA (set as the current device), "cpu" for the CPU,
    `device` unchanged for one process ("auto" resolved)."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if env_world_size() <= 1 and not active():
        return device
    want_cuda = str(device).startswith("cuda")
    if dist is None or not dist.is_available():
        raise DistributedError("WORLD_SIZE > 1 but this torch has no torch.distributed")
    if want_cuda:
        if str(device) != "cuda":
            raise DistributedError(f"under torchrun each process takes cuda:LOCAL_RANK; pass "
                                   f"--device cuda (or auto), not {device}")
        if not torch.cuda.is_available():
            raise DistributedError("--device cuda under torchrun, but torch sees no GPU")
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if local >= torch.cuda.device_count():
            raise DistributedError(f"LOCAL_RANK {local} but this machine has "
                                   f"{torch.cuda.device_count()} GPUs")
        torch.cuda.set_device(local)
        out = f"cuda:{local}"
    elif str(device) == "cpu":
        out = "cpu"
    else:
        raise DistributedError(f"device {device!r}: under torchrun use cuda or cpu")
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if want_cuda else "gloo")
    return out


def ensure_initialised(device):
    """compress_model and distill called under torchrun without a process group: start
    one (init_from_env) for their device. Nothing happens for one process."""
    if active() or env_world_size() <= 1:
        return
    dev = torch.device(device) if device is not None else None
    init_from_env("cpu" if dev is not None and dev.type == "cpu" else
                  "cuda" if dev is not None else "auto")


def shutdown():
    """The end of a command under torchrun: every rank waits for the others, then the
    process group is destroyed (torch warns at exit otherwise)."""
    if active():
        barrier()
        dist.destroy_process_group()


def barrier():
    if active():
        if dist.get_backend() == "nccl":
            dist.barrier(device_ids=[torch.cuda.current_device()])
        else:
            dist.barrier()


def _comm_device():
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _to_comm(t):
    return t.to(_comm_device()).contiguous()


# ----------------------------------------------------------------- collectives

_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
           torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]


def broadcast_tensor(t, src):
    """The tensor `t` of rank `src` on every rank (other ranks pass None, or anything:
    it is ignored). Shape and dtype travel first; the result is on `t`'s device on
    `src`, on the comm device (the CPU for gloo) elsewhere."""
    if not active():
        return t
    me = rank()
    if me == src:
        header = torch.tensor([_DTYPES.index(t.dtype), t.dim(), *t.shape], dtype=torch.long)
        n = torch.tensor([header.numel()], dtype=torch.long)
    else:
        n = torch.zeros(1, dtype=torch.long)
    n = _to_comm(n)
    dist.broadcast(n, src)
    if me != src:
        header = torch.zeros(int(n), dtype=torch.long)
    header = _to_comm(header)
    dist.broadcast(header, src)
    h = header.tolist()
    dtype, shape = _DTYPES[h[0]], h[2:2 + h[1]]
    if me == src:
        buf = _to_comm(t)
        dist.broadcast(buf, src)
        return t
    buf = torch.empty(shape, dtype=dtype, device=_comm_device())
    dist.broadcast(buf, src)
    return buf


def broadcast_object(obj, src):
    """A picklable object (tensors inside come back on the CPU) of rank `src`."""
    if not active():
        return obj
    if rank() == src:
        data = torch.frombuffer(bytearray(pickle.dumps(_cpu(obj))), dtype=torch.uint8)
    else:
        data = None
    data = broadcast_tensor(data, src)
    return obj if rank() == src else pickle.loads(data.cpu().numpy().tobytes())


def _cpu(obj):
    if torch.is_tensor(obj):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu(v) for v in obj)
    return obj


def send_tensor(t, dst):
    """Point to point, the receiver not knowing the shape: recv_tensor(src) on `dst`."""
    header = torch.tensor([_DTYPES.index(t.dtype), t.dim(), *t.shape]
                          + [0] * (8 - t.dim()), dtype=torch.long)
    if t.dim() > 8:
        raise DistributedError("send_tensor: more than 8 dimensions")
    dist.send(_to_comm(header), dst)
    dist.send(_to_comm(t), dst)


def recv_tensor(src, device=None):
    header = torch.zeros(10, dtype=torch.long, device=_comm_device())
    dist.recv(header, src)
    h = header.tolist()
    buf = torch.empty(h[2:2 + h[1]], dtype=_DTYPES[h[0]], device=_comm_device())
    dist.recv(buf, src)
    return buf if device is None else buf.to(device)


def all_reduce_fixed(tensors, bucket_elems=1 << 24):
    """Sum each tensor of `tensors` over the ranks, in place, adding the ranks' values
    in rank order (0 + 1 + … + N-1, left to right) on every rank: the same bits on
    every rank and in every run on N processes. Tensors of one dtype travel together
    in buckets of at most bucket_elems elements (an all-gather holds N of them)."""
    tensors = [t for t in tensors if t is not None]
    if not active() or not tensors:
        return tensors
    world = size()
    by_dtype = {}
    for t in tensors:
        by_dtype.setdefault(t.dtype, []).append(t)
    for dtype, ts in by_dtype.items():
        i = 0
        while i < len(ts):
            j, n = i, 0
            while j < len(ts) and (j == i or n + ts[j].numel() <= bucket_elems):
                n += ts[j].numel()
                j += 1
            group = ts[i:j]
            flat = torch.cat([t.detach().reshape(-1).to(_comm_device()) for t in group])
            parts = [torch.empty_like(flat) for _ in range(world)]
            dist.all_gather(parts, flat)
            total = parts[0].clone()
            for p in parts[1:]:
                total += p
            off = 0
            for t in group:
                k = t.numel()
                t.copy_(total[off:off + k].view_as(t))
                off += k
            i = j
    return tensors


def broadcast_module(module, src=0):
    """Every parameter and buffer of `module` set to rank `src`'s values (the same
    model on every rank before data parallel training)."""
    if not active():
        return
    for t in list(module.parameters()) + list(module.buffers()):
        if t.numel() == 0:
            continue
        buf = _to_comm(t.detach())
        dist.broadcast(buf, src)
        with torch.no_grad():
            t.copy_(buf)


# ----------------------------------------------------------------- dividing the work

def schedule(costs, world):
    """The rank that does each item: longest first to the least loaded rank (ties to
    the item listed first and the lowest rank). The same on every rank."""
    load = [0.0] * world
    owner = [0] * len(costs)
    for i in sorted(range(len(costs)), key=lambda k: (-costs[k], k)):
        r = min(range(world), key=lambda q: (load[q], q))
        owner[i] = r
        load[r] += costs[i]
    return owner


def shard(n, world, r):
    """The slice [lo, hi) of n items that rank r of world takes: contiguous, sizes
    differing by at most one, the larger ones first."""
    base, extra = divmod(n, world)
    lo = r * base + min(r, extra)
    return lo, lo + base + (1 if r < extra else 0)
