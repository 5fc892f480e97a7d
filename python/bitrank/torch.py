"""BLRLinear: a binary low-rank linear layer as a torch module, run by the C library.

    y = x . W^T + bias,   W = sum_p diag(h_p) . S_U,p . diag(l_p) . S_V,p^T . diag(g_p)

The signs are buffers in the file layout (uint8 bitmaps, docs/FORMAT.md); h, l, g
(float32) and the bias are parameters. On CUDA tensors the forward and backward run
through the library's kernels on torch's current stream; on CPU tensors through the
library's CPU backend (backend="library", the default where the library loads). The
library computes with f16 operands and f32 accumulation (include/bitrank.h);
backend="torch" computes the same product in torch at the input's precision without
the library (a reference, and a fallback for devices the library does not run on).

Where no autograd graph is needed (torch.no_grad(), inference_mode, or neither x nor
any of the module's parameters requiring grad) a module with backend="library" runs
the forward through one of the library's inference plans instead, kept per module
and rebuilt when u, v, h, l or g change:
- on CPU tensors the CPU plan (br_blr_infer: lookup-table kernels straight from the
  sign bits, f32 results, include/bitrank.h);
- on CUDA tensors of f16 or bf16 (f32 is cast to f16 and back) the CUDA plan
  (br_blr_infer_cuda), on torch's current stream, where the library has it (a
  library without it runs the training forward there, as before). Its runs
  allocate nothing once a run of as many tokens has happened, so a forward can be
  captured in torch.cuda.graph after one eager forward of at least the captured
  token count (a capture that would build or grow a plan is refused with a message
  saying so).
`module.infer_kernel` names the kernel the last plan forward ran ("avx2-lut" or
"portable" on the CPU; the CUDA plan's name, e.g. "decode_resident", "decode" or "prefill").

pack_for_inference (bitrank.inference) makes a module inference-only: its plan is
the one copy of the weights on the device, its parameters move to host memory, its
training state is freed; its forward then always runs the plan, and one that needs a
graph is refused (unpack_for_training undoes it).

The backward gives dx, dh, dl, dg, and with `sign_grads = True` also the sign
gradients G_U = dL/dS_U, G_V = dL/dS_V (the signs taken as real) in
`module.grad_u`, `module.grad_v` ([P][m][r], [P][n][r]): what the library's sign
optimizer (LibraryOptimizer below) and straight-through estimators train on.
"""
import ctypes
import itertools
import math
import threading
import warnings
import weakref

import torch
from torch import nn

from . import _lib
from . import layout


def _is_aligned(t):
    """The library takes buffers at 16-byte boundaries (br_buf_wrap)."""
    return t.is_contiguous() and t.data_ptr() % 16 == 0


def _aligned(t):
    return t if _is_aligned(t) else t.contiguous().clone()


def _alloc(*shape, device, dtype=torch.float32):
    """Every output the library writes is allocated here (tests poison it)."""
    return torch.empty(*shape, device=device, dtype=dtype)


_HALF = (torch.float16, torch.bfloat16)
_PLAN_DTYPES = (torch.float32,) + _HALF


def _raw_stream(device):
    """The cudaStream_t torch's current stream on `device` is, as an int: the private
    getter inductor uses where it exists (a Python Stream object is a few
    microseconds per call, and every layer of a model asks), else the public API."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(index)
    return torch.cuda.current_stream(index).cuda_stream


def _capturing(device):
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


# ---- torch.compile: the library's forward as one custom operator
#
# Dynamo cannot trace the ctypes calls of a forward, so under torch.compile a
# BLRLinear that needs no autograd graph puts one opaque operator in the graph,
# bitrank::blr_linear(x [ntok][n], module id, m) -> y [ntok][m] in x's dtype; when the
# compiled graph runs it looks the module up by id and runs its forward as eager
# code would (the same plan, the same kernels, the same checks). The module id is a
# constant of the graph: each module instance has its own (copies and unpickled
# modules get new ones).
_compiling = torch.compiler.is_compiling
_MODULES = weakref.WeakValueDictionary()  # module id -> BLRLinear
_MODULE_IDS = itertools.count(1)


def _register(mod):
    mod._op_id = next(_MODULE_IDS)
    _MODULES[mod._op_id] = mod


@torch.library.custom_op("bitrank::blr_linear", mutates_args=())
def _blr_linear_op(x: torch.Tensor, module_id: int, out_features: int) -> torch.Tensor:
    mod = _MODULES.get(module_id)
    if mod is None:
        raise RuntimeError(f"bitrank::blr_linear: BLRLinear {module_id}, which this compiled "
                           "graph runs, no longer exists (compile the model again)")
    if mod.out_features != out_features or x.dim() != 2 or x.shape[1] != mod.in_features:
        raise RuntimeError(f"bitrank::blr_linear: BLRLinear {module_id} is {mod.in_features} "
                           f"-> {mod.out_features}, called with {tuple(x.shape)} -> "
                           f"{out_features}")
    with torch.no_grad():
        return mod._forward_2d(x)


@_blr_linear_op.register_fake
def _blr_linear_fake(x, module_id, out_features):
    return x.new_empty(x.shape[0], out_features)


class BLRLinear(nn.Module):
    """A compressed nn.Linear of `paths` binary low-rank paths of rank `rank`."""

    # defaults for modules unpickled from before these existed
    _infer_cuda = None
    _captured = ()
    _pack_device = None
    _pack_requires_grad = None
    _op_id = None

    def __init__(self, in_features, out_features, rank, paths=2, bias=True, device=None,
                 backend="library"):
        super().__init__()
        _register(self)
        if paths not in (1, 2):
            raise ValueError(f"BLRLinear: paths must be 1 or 2, not {paths}")
        if rank < 1 or in_features < 1 or out_features < 1:
            raise ValueError("BLRLinear: rank, in_features and out_features must be >= 1")
        self.in_features, self.out_features = in_features, out_features
        self.rank, self.paths = rank, paths
        rb = (rank + 7) // 8
        m, n = out_features, in_features
        self.register_buffer("u", torch.zeros(paths, m, rb, dtype=torch.uint8, device=device))
        self.register_buffer("v", torch.zeros(paths, n, rb, dtype=torch.uint8, device=device))
        self.h = nn.Parameter(torch.zeros(paths, m, device=device))
        self.l = nn.Parameter(torch.zeros(paths, rank, device=device))
        self.g = nn.Parameter(torch.zeros(paths, n, device=device))
        self.bias = nn.Parameter(torch.zeros(m, device=device)) if bias else None
        self.backend = backend
        self.sign_grads = False
        self.grad_u = None
        self.grad_v = None
        # curvature = True (with sign_grads): the backward also sums Σ_t a[t][k]² per
        # path and Σ_t x[t][j]² into sum_a2 [paths][rank], sum_x2 [in_features], what
        # LibraryOptimizer's exact-flip sign mode predicts a flip's effect from
        self.curvature = False
        self.sum_a2 = None
        self.sum_x2 = None
        self._state = {}  # device -> _LayerState (the library's layer, its scratch)
        self._fwd_id = 0
        self._infer = None  # _InferPlan: the CPU inference plan of the current parameters
        self._infer_cuda = None  # _CudaPlan: the CUDA inference plan of them
        # plans a CUDA graph captured: kept until the module goes, never freed under
        # a graph that may still replay them
        self._captured = []
        # the device whose plan holds this module's weights (pack_for_inference);
        # None: not packed
        self._pack_device = None
        self._pack_requires_grad = None
        self.infer_kernel = None  # the kernel the last inference-plan forward ran

    # ---- construction and conversion

    @classmethod
    def from_layer(cls, layer, bias=None, device=None, backend="library"):
        """From a layout dict {"u", "v", "h", "l", "g", "rank"} (docs/FORMAT.md shapes)."""
        u, v = layer["u"], layer["v"]
        paths, m, _ = u.shape
        n = v.shape[1]
        mod = cls(n, m, int(layer["rank"]), paths, bias=bias is not None, device=device,
                  backend=backend)
        with torch.no_grad():
            mod.u.copy_(u)
            mod.v.copy_(v)
            mod.h.copy_(layer["h"])
            mod.l.copy_(layer["l"])
            mod.g.copy_(layer["g"])
            if bias is not None:
                mod.bias.copy_(bias)
        return mod

    def to_layer(self):
        """The layout dict of this layer (tensors detached, on the CPU)."""
        return {"u": self.u.detach().cpu(), "v": self.v.detach().cpu(),
                "h": self.h.detach().float().cpu(), "l": self.l.detach().float().cpu(),
                "g": self.g.detach().float().cpu(), "rank": self.rank}

    def dense_weight(self, dtype=torch.float32):
        """W [out][in] formed densely (for inspection and references)."""
        return layout.reconstruct(self.u, self.v, self.h.detach(), self.l.detach(),
                                  self.g.detach(), self.rank, torch.float64).to(dtype)

    def bits_per_weight(self):
        return layout.bpw(self.out_features, self.in_features, self.rank, self.paths)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"rank={self.rank}, paths={self.paths}, bias={self.bias is not None}, "
                f"bpw={self.bits_per_weight():.3f}"
                + (f", packed for {self._pack_device}" if self._pack_device is not None else ""))

    def _apply(self, fn, *args, **kwargs):
        # moving the module drops the library state and plans of the old device
        self._release()
        if self._pack_device is None:
            return super()._apply(fn, *args, **kwargs)
        # A packed module stays packed: its parameters stay in host memory and the
        # device it is sent to (model.to("cuda:1"), a pipeline's model.to(device))
        # becomes its plan's, built there at the next forward; a dtype change applies
        # to the host copies. Where fn sends tensors is read off an empty probe.
        try:
            target = fn(torch.empty(0, device=self._pack_device)).device
        except RuntimeError:  # the plan's device is not here (an unpickled model)
            target = fn(torch.empty(0)).device
        out = super()._apply(fn, *args, **kwargs)
        self._params_to_host()
        self._pack_device = _resolve(target)
        return out

    def _free_plan(self, plan):
        if plan is None:
            return
        if plan.captured:
            self._captured = list(self._captured) + [plan]
        else:
            plan.free()

    def _release(self):
        for st in getattr(self, "_state", {}).values():
            st.free()
        self._state = {}
        for slot in ("_infer", "_infer_cuda"):
            self._free_plan(getattr(self, slot, None))
            setattr(self, slot, None)

    def __del__(self):
        try:
            self._release()
            for plan in self._captured:
                plan.free()
            self._captured = []
        except Exception:
            pass

    def __getstate__(self):
        d = self.__dict__.copy()
        d["_state"] = {}
        d["_infer"] = None
        d["_infer_cuda"] = None
        d["_captured"] = []
        d.pop("_op_id", None)
        return d

    def __setstate__(self, d):
        super().__setstate__(d)
        _register(self)  # a copy is another module: its own id

    # ---- packing for inference (bitrank.pack_for_inference)

    @property
    def packed(self):
        """The device whose inference plan holds this module's weights, or None."""
        return self._pack_device

    def _params_to_host(self):
        with torch.no_grad():
            for name in ("h", "l", "g", "bias"):
                par = getattr(self, name)
                if par is not None and par.device.type != "cpu":
                    par.data = par.data.to("cpu")
                    par.grad = None
            for name in ("u", "v"):
                buf = getattr(self, name)
                if buf.device.type != "cpu":
                    setattr(self, name, buf.to("cpu"))

    def pack(self, device=None):
        """Make this module inference-only on `device` (default: where its parameters
        are): its inference plan there is built now and is the one device copy of
        the weights; the library's training layer and scratch, the gradients and
        the sign gradients are freed; u, v, h, l, g and the bias move to host memory
        (the plan is rebuilt from them if they change, and save_pretrained reads
        them) and stop requiring grad. Returns the plan's device."""
        if device is None:
            device = self._pack_device or self.h.device
        device = _resolve(device)
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"BLRLinear.pack: no inference plan on {device}")
        if device.type == "cuda" and not _lib.has_cuda_infer():
            raise _lib.BitrankError(
                "BR_E_UNSUPPORTED", f"{_lib.library_path()} has no CUDA inference plan "
                "(br_blr_infer_cuda_*): build the library from a tree that has it to pack "
                "for a GPU")
        if self._pack_device is None:
            self._pack_requires_grad = {n: p.requires_grad for n, p in self.named_parameters()}
        self._release()
        self.grad_u = self.grad_v = self.sum_a2 = self.sum_x2 = None
        for p in self.parameters():
            p.grad = None
            p.requires_grad_(False)
        self._params_to_host()
        self._pack_device = device
        if device.type == "cuda":
            self._cuda_plan(device)
        else:
            self._infer_plan()
        return device

    def unpack(self, device=None):
        """Undo pack(): the parameters back on `device` (default: the plan's), trainable
        as they were before packing, the plan freed."""
        if self._pack_device is None:
            return
        device = _resolve(device) if device is not None else self._pack_device
        self._release()
        with torch.no_grad():
            for name in ("h", "l", "g", "bias"):
                par = getattr(self, name)
                if par is not None:
                    par.data = par.data.to(device)
            self.u = self.u.to(device)
            self.v = self.v.to(device)
        for name, p in self.named_parameters():
            p.requires_grad_((self._pack_requires_grad or {}).get(name, True))
        self._pack_device = None
        self._pack_requires_grad = None

    def plan_bytes(self):
        """(bytes, kind) of the weights as this module holds them for inference: a live
        CUDA plan's device bytes as the library counts them (its scratch included)
        plus its bias copies, kind "cuda-plan"; for a CPU plan or a module without a
        live plan, the sign bitmaps (rows padded to the plans' 32 signs) and f32
        scales and bias a plan holds, kind "estimate"."""
        plan = self._infer_cuda
        if plan is not None and plan.ptr:
            return plan.nbytes(), "cuda-plan"
        r32 = (self.rank + 31) // 32 * 32
        m32 = (self.out_features + 31) // 32 * 32
        n32 = (self.in_features + 31) // 32 * 32
        per_path = (m32 + n32) * r32 // 8 + 4 * (self.out_features + self.in_features
                                                 + self.rank)
        bias = 4 * self.out_features if self.bias is not None else 0
        return self.paths * per_path + bias, "estimate"

    # ---- forward

    def forward(self, x):
        shape = x.shape
        if shape[-1] != self.in_features:
            raise ValueError(f"BLRLinear: input has {shape[-1]} features, the layer "
                             f"{self.in_features}")
        x2 = x.reshape(-1, self.in_features)
        if (_compiling() and not self._needs_graph(x2)
                and (self._pack_device is not None or self.backend == "library")):
            # torch.compile: the library's forward is one opaque operator in the graph
            # (no graph break); it runs _forward_2d below when the graph runs
            y = torch.ops.bitrank.blr_linear(x2, self._op_id, self.out_features)
            return y.reshape(*shape[:-1], self.out_features)
        return self._forward_2d(x2).reshape(*shape[:-1], self.out_features)

    def _forward_2d(self, x2):
        """y [ntok][m] in x2's dtype = the layer of x2 [ntok][n] (+ bias), by the plan
        or the training forward as the module and the input say."""
        where = self._plan_device(x2)
        if where is not None:
            if x2.shape[0] == 0:
                y = x2.new_zeros(0, self.out_features)
            elif where.type == "cuda":
                plan = self._cuda_plan(where)
                y = plan.run(x2, self.bias)
                self.infer_kernel = plan.kernel()
            else:
                plan = self._infer_plan()
                y = plan.run(x2, self.bias)
                self.infer_kernel = plan.kernel
            return y.to(x2.dtype)
        if self.backend == "torch" or x2.shape[0] == 0:
            y = self._torch_forward(x2)
        else:
            y = _BLRFunction.apply(x2, self.h, self.l, self.g, self)
        y = y.to(x2.dtype)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y

    def _needs_graph(self, x2):
        """Whether this forward must record an autograd graph (which the plans cannot:
        they have no backward): grad mode on and x or a parameter requiring grad."""
        if not torch.is_grad_enabled():
            return False
        if x2.requires_grad:
            return True
        params = [self.h, self.l, self.g] + ([self.bias] if self.bias is not None else [])
        return any(p.requires_grad for p in params)

    def _plan_device(self, x2):
        """The device of the inference plan this forward runs, or None for the
        training forward: backend "library", x and the module on the CPU, or x on a
        GPU the module is on where the library has the CUDA plan; an f32/f16/bf16
        input; no autograd graph to record. A packed module has no other forward:
        what it cannot run is refused here."""
        dev = x2.device
        if self._pack_device is not None:
            if self._needs_graph(x2):
                raise RuntimeError(
                    "BLRLinear: packed for inference (bitrank.pack_for_inference), it has "
                    "no backward: call bitrank.unpack_for_training(model) to train it, or "
                    "run under torch.no_grad()")
            if dev != self._pack_device:
                raise RuntimeError(f"BLRLinear: packed for inference on {self._pack_device}, "
                                   f"the input is on {dev} (model.to({str(dev)!r}) moves "
                                   "the plan)")
            if x2.dtype not in _PLAN_DTYPES:
                raise TypeError(f"BLRLinear: packed for inference, its plan takes float32, "
                                f"float16 or bfloat16 inputs, not {x2.dtype}")
            if dev.type == "cuda" and not _lib.has_cuda_infer():
                raise _lib.BitrankError(
                    "BR_E_UNSUPPORTED", f"BLRLinear: packed for {dev}, but "
                    f"{_lib.library_path()} has no CUDA inference plan (br_blr_infer_cuda_*)")
            return dev
        if self.backend != "library" or x2.dtype not in _PLAN_DTYPES:
            return None
        if self.h.device != dev or dev.type not in ("cpu", "cuda"):
            return None
        if dev.type == "cuda" and not _lib.has_cuda_infer():
            return None
        if self._needs_graph(x2):
            return None
        return dev

    def _plan_key(self):
        """What a plan was built from: each of u, v, h, l, g's version counter (in-place
        writes, copy_, optimizer steps), storage, shape and dtype."""
        return tuple((t._version, t.data_ptr(), tuple(t.shape), t.dtype)
                     for t in (self.u, self.v, self.h, self.l, self.g))

    def _plan(self, slot, cls, device):
        """The plan in `slot` for the parameters as they are now, rebuilt when they
        changed since it was built."""
        key = self._plan_key()
        plan = getattr(self, slot)
        if plan is not None and plan.key == key and plan.device == device:
            return plan
        if _capturing(device):
            raise RuntimeError(
                "BLRLinear: a CUDA graph capture needs this layer's inference plan built "
                "before it (run one forward outside the capture, after the last change of "
                "the parameters)")
        setattr(self, slot, None)
        self._free_plan(plan)
        if plan is not None and plan.captured:
            warnings.warn("BLRLinear: the parameters changed after a CUDA graph captured "
                          "this layer: that graph still runs the old weights (capture it "
                          "again)", stacklevel=4)
        plan = cls(self, key, device)
        setattr(self, slot, plan)
        return plan

    def _infer_plan(self):
        """The CPU inference plan of the parameters as they are now."""
        return self._plan("_infer", _InferPlan, torch.device("cpu"))

    def _cuda_plan(self, device):
        """The CUDA inference plan on `device` of the parameters as they are now."""
        return self._plan("_infer_cuda", _CudaPlan, device)

    def _torch_forward(self, x2):
        dt = x2.dtype if x2.dtype in (torch.float32, torch.float64) else torch.float32
        x2 = x2.to(dt)
        su = layout.unpack_signs(self.u, self.rank, dt)
        sv = layout.unpack_signs(self.v, self.rank, dt)
        y = 0
        for p in range(self.paths):
            a = (x2 * self.g[p].to(dt)) @ sv[p]
            y = y + ((a * self.l[p].to(dt)) @ su[p].T) * self.h[p].to(dt)
        return y

    def _layer_state(self, device):
        key = str(device)
        st = self._state.get(key)
        if st is None:
            st = _LayerState(self, device)
            self._state[key] = st
        return st


def cast_except_blr(model, dtype):
    """model's floating parameters and buffers to `dtype`, except the BLRLinear scales,
    which stay float32 (a bf16 model's scales would otherwise lose 8 bits before the
    file's f16 rounding)."""
    for mod in model.modules():
        if isinstance(mod, BLRLinear):
            continue
        for name, p in mod.named_parameters(recurse=False):
            if p.is_floating_point():
                p.data = p.data.to(dtype)
        for name, b in mod.named_buffers(recurse=False):
            if b.is_floating_point():
                setattr(mod, name, b.to(dtype))
    return model


def _resolve(device):
    """A torch.device with its index ("cuda" -> "cuda:N", the current one)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _host_layer(mod):
    """The br_blr_host of a module's parameters (host copies: u32 sign words, f32
    scales) and the tensors it points into, which must live until the library copied
    them."""
    host = _lib.BlrHost(m=mod.out_features, n=mod.in_features, r=mod.rank, paths=mod.paths)
    keep = []
    u32 = ctypes.POINTER(ctypes.c_uint32)
    f32 = ctypes.POINTER(ctypes.c_float)
    cpu = torch.device("cpu")
    for p in range(mod.paths):
        arrays = (layout.words32(mod.u[p].detach().to(cpu), mod.rank).contiguous(),
                  layout.words32(mod.v[p].detach().to(cpu), mod.rank).contiguous(),
                  mod.h.detach()[p].to(cpu, torch.float32).contiguous(),
                  mod.l.detach()[p].to(cpu, torch.float32).contiguous(),
                  mod.g.detach()[p].to(cpu, torch.float32).contiguous())
        keep += arrays
        hp = host.path[p]
        hp.bits_u = ctypes.cast(arrays[0].data_ptr(), u32)
        hp.bits_v = ctypes.cast(arrays[1].data_ptr(), u32)
        hp.h = ctypes.cast(arrays[2].data_ptr(), f32)
        hp.l = ctypes.cast(arrays[3].data_ptr(), f32)
        hp.g = ctypes.cast(arrays[4].data_ptr(), f32)
    return host, keep


class _Plan:
    """What the CPU and CUDA inference plans share: the key of the parameters a plan
    was built from (BLRLinear._plan_key), building it from their host form, freeing
    it. Subclasses name their library functions (NEW, FREE) and run it. `calls`
    counts builds and runs per class (tests check which path ran)."""
    NEW = FREE = None

    def __init__(self, mod, key, device):
        self.key = key
        self.device = device
        self.ctx = _lib.context(device)
        self.lib = self.ctx._lib
        self.m, self.n = mod.out_features, mod.in_features
        self.ptr = None
        self.captured = False  # a CUDA graph captured a run of it
        host, keep = _host_layer(mod)
        ptr = _lib.P()
        self._build(host, ptr)
        del keep  # the plan copied what it needs
        self.ptr = ptr
        type(self).calls["build"] += 1

    def _build(self, host, ptr):
        self.ctx.check(getattr(self.lib, self.NEW)(self.ctx.ptr, ctypes.byref(host),
                                                   ctypes.byref(ptr)))

    def free(self):
        if getattr(self, "ptr", None):
            getattr(self.lib, self.FREE)(self.ptr)
            self.ptr = None

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass


class _InferPlan(_Plan):
    """A library CPU inference plan (br_blr_infer) of one module's parameters. The
    plan holds its own copy of the signs and scales; a run writes the plan's scratch,
    so runs of one plan are serialized (ctypes lets other Python threads run meanwhile)."""
    NEW, FREE = "br_blr_infer_new", "br_blr_infer_free"
    calls = {"build": 0, "run": 0}

    def __init__(self, mod, key, device):
        self.lock = threading.Lock()
        super().__init__(mod, key, device)
        self.kernel = self.lib.br_blr_infer_kernel(self.ptr).decode()

    def run(self, x2, bias):
        """y [ntok][m] f32 = the layer of x2 [ntok][n] (+ bias), x2 converted to f32."""
        x32 = x2.detach().to(torch.float32).contiguous()
        ntok = x32.shape[0]
        y = _alloc(ntok, self.m, device=x32.device)
        b32 = bias.detach().float().contiguous() if bias is not None else None
        with self.lock:
            st = self.lib.br_blr_infer_run(self.ptr, _lib.P(x32.data_ptr()), ntok,
                                           _lib.P(b32.data_ptr()) if b32 is not None else None,
                                           _lib.P(y.data_ptr()))
        self.ctx.check(st)
        _InferPlan.calls["run"] += 1
        return y


class _CudaPlan(_Plan):
    """A library CUDA inference plan (br_blr_infer_cuda) of one module's parameters on
    one GPU: its own device copy of the signs and scales, run asynchronously on
    torch's current stream (the shared context follows it; the library orders a
    switch after the work issued before). The bias goes to the library in the
    activations' dtype: one device copy per dtype, made at the first run of that
    dtype and again when the bias changes. The runs' scratch is the shared context's
    workspace, which only grows: `max_ntok` is the most tokens a run of this layer
    had, and a larger run may grow the workspace (refused while a CUDA graph is being
    captured)."""
    NEW, FREE = "br_blr_infer_cuda_new", "br_blr_infer_cuda_free"
    calls = {"build": 0, "run": 0}

    def __init__(self, mod, key, device):
        self.max_ntok = 0
        self._bias = {}  # dtype -> (bias key, device tensor)
        super().__init__(mod, key, device)

    def _build(self, host, ptr):
        with self.ctx.lock:
            # the upload is ordered after the work torch issued on its stream so far
            self.ctx.set_stream(_raw_stream(self.device))
            super()._build(host, ptr)

    def _bias_for(self, bias, dtype, capturing):
        if bias is None:
            return None
        key = (bias._version, bias.data_ptr(), bias.device)
        held = self._bias.get(dtype)
        if held is not None and held[0] == key:
            return held[1]
        if capturing:
            raise RuntimeError(
                f"BLRLinear: a CUDA graph capture ran a {dtype} forward, which needs a bias "
                "copy this layer did not make before it (run one forward of that dtype "
                "outside the capture)")
        b = bias.detach().to(self.device, dtype, copy=True).contiguous()
        self._bias[dtype] = (key, b)
        return b

    def bias_bytes(self):
        return sum(b.numel() * b.element_size() for _, b in self._bias.values())

    def nbytes(self):
        """The device bytes the plan holds (the library's count) and its bias copies."""
        return int(self.lib.br_blr_infer_cuda_bytes(self.ptr)) + self.bias_bytes()

    def kernel(self):
        return self.lib.br_blr_infer_cuda_kernel(self.ptr).decode()

    def run(self, x2, bias):
        """y [ntok][m] in x2's dtype (f16/bf16 as given, f32 through f16) = the layer of
        x2 [ntok][n] (+ bias)."""
        xh = x2.detach()
        if xh.dtype not in _HALF:
            xh = xh.to(torch.float16)
        xh = _aligned(xh.contiguous())
        ntok = xh.shape[0]
        capturing = torch.cuda.is_current_stream_capturing()
        if capturing and ntok > self.max_ntok:
            raise RuntimeError(
                f"BLRLinear: a CUDA graph capture ran a forward of {ntok} tokens, more than "
                f"any run of this layer before it ({self.max_ntok}): the plan's scratch would "
                f"grow inside the capture; run one forward of at least {ntok} tokens outside "
                "the capture first")
        b = self._bias_for(bias, xh.dtype, capturing)
        y = _alloc(ntok, self.m, device=xh.device, dtype=xh.dtype)
        act = _lib.ACT_BF16 if xh.dtype == torch.bfloat16 else _lib.ACT_F16
        with self.ctx.lock:
            self.ctx.set_stream(_raw_stream(self.device))
            st = self.lib.br_blr_infer_cuda_run(self.ptr, act, _lib.P(xh.data_ptr()), ntok,
                                                _lib.P(b.data_ptr()) if b is not None else None,
                                                _lib.P(y.data_ptr()))
        self.ctx.check(st)
        self.max_ntok = max(self.max_ntok, ntok)
        if capturing:
            self.captured = True
        _CudaPlan.calls["run"] += 1
        # xh, b: the caching allocator reuses their memory only for work issued later
        # on this stream, which runs after this kernel
        return y

class _LayerState:
    """The library's layer and scratch for one module on one device."""

    def __init__(self, mod, device):
        self.ctx = _lib.context(device)
        self.lib = self.ctx._lib
        self.device = device
        self.m, self.n = mod.out_features, mod.in_features
        self.r, self.paths = mod.rank, mod.paths
        self.r32 = (self.r + 31) // 32 * 32
        self.flags = 0
        self.layer = None
        self.scratch = None
        self.cap = 0
        self.last_fwd = -1
        self._new_layer(0)

    def _new_layer(self, flags):
        if self.scratch:
            self.lib.br_blr_scratch_free(self.scratch)
            self.scratch, self.cap = None, 0
        if self.layer:
            self.lib.br_blr_free(self.layer)
        ptr = _lib.P()
        self.ctx.check(self.lib.br_blr_new(self.ctx.ptr, self.m, self.n, self.r32, self.paths,
                                           flags, ctypes.byref(ptr)))
        self.layer, self.flags = ptr, flags
        self.last_fwd = -1

    def free(self):
        if self.scratch:
            self.lib.br_blr_scratch_free(self.scratch)
        if self.layer:
            self.lib.br_blr_free(self.layer)
        self.scratch = self.layer = None

    def stream(self):
        if self.ctx.is_cuda:
            self.ctx.set_stream(_raw_stream(torch.device(self.device)))

    def ensure(self, ntok, flags):
        if flags != self.flags:
            self._new_layer(flags)
        if ntok > self.cap:
            if self.scratch:
                self.lib.br_blr_scratch_free(self.scratch)
                self.scratch = None
            cap = max(ntok, 2 * self.cap)
            ptr = _lib.P()
            self.ctx.check(self.lib.br_blr_scratch_new(self.layer, cap, None, ctypes.byref(ptr)))
            self.scratch, self.cap = ptr, cap

    def forward(self, bx, by, ntok):
        """The library's plain forward of the wrapped x into y (br_blr_forward)."""
        desc = _lib.BlrFwd(x=bx.ptr, out=by.ptr, ntok=ntok)
        self.ctx.check(self.lib.br_blr_forward(self.layer, self.scratch, ctypes.byref(desc)))

    def part(self, p, which):
        buf = self.lib.br_blr_buf(self.layer, p, which)
        if not buf:
            raise _lib.BitrankError("BR_E_STATE", "the layer has no such part")
        return buf

    def copy_in(self, p, which, tensor, dtype):
        src = self.ctx.wrap(_aligned(tensor), dtype)
        self.ctx.check(self.lib.br_buf_copy(self.part(p, which), 0, src.ptr, 0, src.count))
        return src  # keep alive until the copy ran (same stream: until the caller syncs)

    def copy_out(self, p, which, tensor, dtype):
        out = tensor if _is_aligned(tensor) else torch.empty_like(tensor)
        dst = self.ctx.wrap(out, dtype)
        self.ctx.check(self.lib.br_buf_copy(dst.ptr, 0, self.part(p, which), 0, dst.count))
        if out is not tensor:
            tensor.copy_(out)
        return dst

    def load_params(self, mod):
        """Upload the module's signs and scales into the library's layer (device copies)."""
        keep = []
        dev = self.device
        for p in range(self.paths):
            keep.append(self.copy_in(p, _lib.BLR_BITS_U, layout.words32(mod.u[p], self.r32),
                                     _lib.BR_U32))
            keep.append(self.copy_in(p, _lib.BLR_BITS_V, layout.words32(mod.v[p], self.r32),
                                     _lib.BR_U32))
            keep.append(self.copy_in(p, _lib.BLR_H, mod.h.detach()[p].float().contiguous(),
                                     _lib.BR_F32))
            lpad = torch.zeros(self.r32, device=dev)
            lpad[:self.r] = mod.l.detach()[p].float()
            keep.append(self.copy_in(p, _lib.BLR_L, lpad, _lib.BR_F32))
            keep.append(self.copy_in(p, _lib.BLR_G, mod.g.detach()[p].float().contiguous(),
                                     _lib.BR_F32))
        return keep


def _layer_flags(mod):
    """br_blr_new's flags for what the module's backward must form."""
    if mod.curvature:
        return _lib.BLR_SIGN_GRADS | _lib.BLR_CURVATURE
    return _lib.BLR_SIGN_GRADS if mod.sign_grads else 0


def _gscale(dy, h, l):
    """A power of two that keeps dy·gs and the backward's b⊙l·gs inside f16's normal
    range (include/bitrank.h, br_blr_backward): |dy|max·gs near 2^12, and the typical
    size of b = dy·(h⊙S_U) (a signed sum over m outputs) times |l|max times gs below
    2^13."""
    amax = float(dy.abs().max())
    if not math.isfinite(amax):
        raise FloatingPointError("BLRLinear backward: the gradient is not finite")
    if amax == 0.0:
        return 1.0
    hn = float(h.detach().float().norm(dim=-1).max())
    lm = float(l.detach().abs().max())
    est_b = 3.0 * amax * max(hn, 1e-30) * max(lm, 1e-30)
    gs = min(4096.0 / amax, 8192.0 / est_b)
    return 2.0 ** max(-60, min(60, math.floor(math.log2(gs))))


class _BLRFunction(torch.autograd.Function):
    """The library's forward and backward (counted in `calls`: tests check it ran)."""
    calls = {"forward": 0, "backward": 0}

    @staticmethod
    def forward(ctx, x2, h, l, g, mod):
        _BLRFunction.calls["forward"] += 1
        st = mod._layer_state(x2.device)
        flags = _layer_flags(mod)
        x32 = _aligned(x2.detach().float().contiguous())
        ntok = x32.shape[0]
        st.stream()
        st.ensure(ntok, flags)
        keep = st.load_params(mod)
        y = _alloc(ntok, st.m, device=x2.device)
        bx, by = st.ctx.wrap(x32, _lib.BR_F32), st.ctx.wrap(y, _lib.BR_F32)
        st.forward(bx, by, ntok)
        mod._fwd_id += 1
        st.last_fwd = mod._fwd_id
        ctx.fwd_id = mod._fwd_id
        ctx.mod = mod
        ctx.save_for_backward(x32)
        # the temporaries may go now: on CUDA the copies are ordered before any later
        # work torch puts on this stream (and so into their memory)
        del keep
        return y

    @staticmethod
    def backward(ctx, dy):
        _BLRFunction.calls["backward"] += 1
        mod = ctx.mod
        (x32,) = ctx.saved_tensors
        st = mod._layer_state(x32.device)
        ntok = x32.shape[0]
        st.stream()
        flags = _layer_flags(mod)
        keep = []
        if st.last_fwd != ctx.fwd_id or flags != st.flags:
            # another forward used the scratch since (or the flags changed): redo ours
            st.ensure(ntok, flags)
            keep += st.load_params(mod)
            y = torch.empty(ntok, st.m, device=x32.device)
            bx, by = st.ctx.wrap(x32, _lib.BR_F32), st.ctx.wrap(y, _lib.BR_F32)
            st.forward(bx, by, ntok)
            keep += [bx, by, y]
            st.last_fwd = ctx.fwd_id
        dy32 = _aligned(dy.detach().float().contiguous())
        gs = _gscale(dy32, mod.h, mod.l)
        need_dx = ctx.needs_input_grad[0]
        dx = _alloc(ntok, st.n, device=x32.device) if need_dx else None
        bx = st.ctx.wrap(x32, _lib.BR_F32)
        bdy = st.ctx.wrap(dy32, _lib.BR_F32)
        bdx = st.ctx.wrap(dx, _lib.BR_F32) if need_dx else None
        st.ctx.check(st.lib.br_blr_backward(st.layer, st.scratch, bx.ptr, bdy.ptr,
                                            bdx.ptr if bdx else None, ntok, gs, 0))
        P, m, n, r, r32 = st.paths, st.m, st.n, st.r, st.r32
        dh = _alloc(P, m, device=x32.device)
        dl = _alloc(P, r32, device=x32.device)
        dg = _alloc(P, n, device=x32.device)
        for p in range(P):
            keep.append(st.copy_out(p, _lib.BLR_DH, dh[p], _lib.BR_F32))
            keep.append(st.copy_out(p, _lib.BLR_DL, dl[p], _lib.BR_F32))
            keep.append(st.copy_out(p, _lib.BLR_DG, dg[p], _lib.BR_F32))
        if flags & _lib.BLR_SIGN_GRADS:
            gu = _alloc(P, m, r32, device=x32.device)
            gv = _alloc(P, n, r32, device=x32.device)
            for p in range(P):
                keep.append(st.copy_out(p, _lib.BLR_GU, gu[p], _lib.BR_F32))
                keep.append(st.copy_out(p, _lib.BLR_GV, gv[p], _lib.BR_F32))
            # summed over backwards until zero_grad, as torch's .grad is (gradient
            # accumulation; a module used twice in one forward)
            gu, gv = gu[:, :, :r], gv[:, :, :r]
            mod.grad_u = gu if mod.grad_u is None else mod.grad_u + gu
            mod.grad_v = gv if mod.grad_v is None else mod.grad_v + gv
        if flags & _lib.BLR_CURVATURE:
            a2 = _alloc(P, r32, device=x32.device)
            x2 = _alloc(n, device=x32.device)
            for p in range(P):
                keep.append(st.copy_out(p, _lib.BLR_SUM_A2, a2[p], _lib.BR_F32))
            keep.append(st.copy_out(0, _lib.BLR_SUM_X2, x2, _lib.BR_F32))
            a2 = a2[:, :r]
            mod.sum_a2 = a2 if mod.sum_a2 is None else mod.sum_a2 + a2
            mod.sum_x2 = x2 if mod.sum_x2 is None else mod.sum_x2 + x2
        del keep
        return dx, dh, dl[:, :r].contiguous(), dg, None


class LibraryOptimizer:
    """The library's optimizer (br_blr_opt: Adam over h, l, g; the sign optimizer over
    S_U, S_V) on BLRLinear modules whose gradients come from backward passes with
    sign_grads = True. step() hands each module's gradients to the library, steps, and
    writes the new scales and signs back into the module.

    sign_mode: "latent" (Adam on a latent real per sign), "exact" (a sign flips where
    the predicted change of the loss of flipping it alone is negative, the most
    negative first: needs module.curvature = True, a flip_budget such as 1e-3, and the
    loss's curvature in y, `curvature`), or "off". Other keywords are br_opt_cfg
    fields (include/bitrank.h)."""

    def __init__(self, modules, lr=1e-3, sign_lr=1e-2, sign_mode="latent", **cfg):
        self.modules = list(modules)
        self.lr, self.sign_lr = lr, sign_lr
        modes = {"off": _lib.SIGN_OFF, "latent": _lib.SIGN_LATENT, "exact": _lib.SIGN_EXACT}
        if sign_mode not in modes:
            raise ValueError(f"LibraryOptimizer: sign_mode must be one of {sorted(modes)}, "
                             f"not {sign_mode!r}")
        if sign_mode == "exact" and not cfg.get("flip_budget"):
            raise ValueError("LibraryOptimizer: sign_mode 'exact' needs a flip_budget (e.g. "
                             "1e-3): its predictions hold for one flip at a time")
        self.mode = modes[sign_mode]
        self.cfg_extra = cfg
        self._opts = {}

    def _opt(self, mod):
        dev = mod.h.device
        st = mod._layer_state(dev)
        if self.mode == _lib.SIGN_EXACT:
            if st.flags != _lib.BLR_SIGN_GRADS | _lib.BLR_CURVATURE:
                raise RuntimeError("LibraryOptimizer: sign_mode 'exact' needs a backward with "
                                   "module.curvature = True before step()")
        elif not st.flags & _lib.BLR_SIGN_GRADS:
            raise RuntimeError("LibraryOptimizer: run a backward with module.sign_grads = True "
                               "before step()")
        key = id(mod)
        entry = self._opts.get(key)
        if entry is None or entry[0] is not st.layer:
            cfg = st.lib.br_opt_defaults()
            cfg.lr, cfg.sign_lr, cfg.sign_mode = self.lr, self.sign_lr, self.mode
            for k, val in self.cfg_extra.items():
                if isinstance(val, (list, tuple)):
                    field_t = type(getattr(cfg, k))
                    val = field_t(*val)
                setattr(cfg, k, val)
            ptr = _lib.P()
            st.ctx.check(st.lib.br_blr_opt_new(st.layer, ctypes.byref(cfg), ctypes.byref(ptr)))
            entry = (st.layer, ptr)
            self._opts[key] = entry
        return st, entry[1]

    def set_lr(self, lr, sign_lr):
        """The learning rates of the next steps (a schedule)."""
        self.lr, self.sign_lr = float(lr), float(sign_lr)
        for mod in self.modules:
            entry = self._opts.get(id(mod))
            if entry is not None:
                st = mod._layer_state(mod.h.device)
                if entry[0] is st.layer:
                    st.ctx.check(st.lib.br_blr_opt_set_lr(entry[1], self.lr, self.sign_lr))

    def zero_grad(self):
        for mod in self.modules:
            for p in (mod.h, mod.l, mod.g):
                p.grad = None
            mod.grad_u = mod.grad_v = None
            mod.sum_a2 = mod.sum_x2 = None

    @torch.no_grad()
    def step(self):
        for mod in self.modules:
            st, opt = self._opt(mod)
            st.stream()
            keep = st.load_params(mod)
            r, r32 = st.r, st.r32
            for p in range(st.paths):
                for par, which in ((mod.h, _lib.BLR_DH), (mod.l, _lib.BLR_DL),
                                   (mod.g, _lib.BLR_DG)):
                    grad = par.grad[p] if par.grad is not None else torch.zeros_like(par[p])
                    if which == _lib.BLR_DL:
                        gp = torch.zeros(r32, device=grad.device)
                        gp[:r] = grad
                        grad = gp
                    keep.append(st.copy_in(p, which, grad.float().contiguous(), _lib.BR_F32))
                for g, which in ((mod.grad_u, _lib.BLR_GU), (mod.grad_v, _lib.BLR_GV)):
                    rows = st.m if which == _lib.BLR_GU else st.n
                    full = torch.zeros(rows, r32, device=mod.h.device)
                    if g is not None:
                        full[:, :r] = g[p]
                    keep.append(st.copy_in(p, which, full, _lib.BR_F32))
                if self.mode == _lib.SIGN_EXACT:
                    a2 = torch.zeros(r32, device=mod.h.device)
                    if mod.sum_a2 is not None:
                        a2[:r] = mod.sum_a2[p]
                    keep.append(st.copy_in(p, _lib.BLR_SUM_A2, a2, _lib.BR_F32))
            if self.mode == _lib.SIGN_EXACT:
                x2 = mod.sum_x2 if mod.sum_x2 is not None else torch.zeros(st.n,
                                                                          device=mod.h.device)
                keep.append(st.copy_in(0, _lib.BLR_SUM_X2, x2.float().contiguous(),
                                       _lib.BR_F32))
            st.ctx.check(st.lib.br_blr_opt_step(opt))
            for p in range(st.paths):
                words = torch.empty(st.m, r32 // 32, dtype=torch.int32, device=mod.h.device)
                keep.append(st.copy_out(p, _lib.BLR_BITS_U, words, _lib.BR_U32))
                wv = torch.empty(st.n, r32 // 32, dtype=torch.int32, device=mod.h.device)
                keep.append(st.copy_out(p, _lib.BLR_BITS_V, wv, _lib.BR_U32))
                h = torch.empty(st.m, device=mod.h.device)
                lp = torch.empty(r32, device=mod.h.device)
                g = torch.empty(st.n, device=mod.h.device)
                keep.append(st.copy_out(p, _lib.BLR_H, h, _lib.BR_F32))
                keep.append(st.copy_out(p, _lib.BLR_L, lp, _lib.BR_F32))
                keep.append(st.copy_out(p, _lib.BLR_G, g, _lib.BR_F32))
                st.ctx.sync()
                mod.u[p].copy_(layout.bytes_from_words(words, r))
                mod.v[p].copy_(layout.bytes_from_words(wv, r))
                mod.h[p].copy_(h)
                mod.l[p].copy_(lp[:r])
                mod.g[p].copy_(g)
            del keep

    def free(self):
        for entry in self._opts.values():
            _lib.lib().br_blr_opt_free(entry[1])
        self._opts = {}
