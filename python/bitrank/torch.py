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
any of the module's parameters requiring grad) a CPU module with backend="library"
runs the forward through the library's CPU inference plan instead (br_blr_infer:
lookup-table kernels straight from the sign bits, f32 results, include/bitrank.h),
kept per module and rebuilt when u, v, h, l or g change; `module.infer_kernel` names
the kernel the last such forward ran ("avx2-lut" or "portable").

The backward gives dx, dh, dl, dg, and with `sign_grads = True` also the sign
gradients G_U = dL/dS_U, G_V = dL/dS_V (the signs taken as real) in
`module.grad_u`, `module.grad_v` ([P][m][r], [P][n][r]): what the library's sign
optimizer (LibraryOptimizer below) and straight-through estimators train on.
"""
import ctypes
import math
import threading

import torch
from torch import nn

from . import _lib
from . import layout


def _is_aligned(t):
    """The library takes buffers at 16-byte boundaries (br_buf_wrap)."""
    return t.is_contiguous() and t.data_ptr() % 16 == 0


def _aligned(t):
    return t if _is_aligned(t) else t.contiguous().clone()


def _alloc(*shape, device):
    """Every f32 output the library writes is allocated here (tests poison it)."""
    return torch.empty(*shape, device=device, dtype=torch.float32)


class BLRLinear(nn.Module):
    """A compressed nn.Linear of `paths` binary low-rank paths of rank `rank`."""

    def __init__(self, in_features, out_features, rank, paths=2, bias=True, device=None,
                 backend="library"):
        super().__init__()
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
        self.infer_kernel = None  # the kernel the last CPU inference forward ran

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
                f"bpw={self.bits_per_weight():.3f}")

    def _apply(self, fn, *args, **kwargs):
        # moving the module drops the library state of the old device
        self._release()
        return super()._apply(fn, *args, **kwargs)

    def _release(self):
        for st in self._state.values():
            st.free()
        self._state = {}
        plan = getattr(self, "_infer", None)
        if plan is not None:
            plan.free()
        self._infer = None

    def __del__(self):
        try:
            self._release()
        except Exception:
            pass

    def __getstate__(self):
        d = self.__dict__.copy()
        d["_state"] = {}
        d["_infer"] = None
        return d

    # ---- forward

    def forward(self, x):
        shape = x.shape
        if shape[-1] != self.in_features:
            raise ValueError(f"BLRLinear: input has {shape[-1]} features, the layer "
                             f"{self.in_features}")
        x2 = x.reshape(-1, self.in_features)
        if self.backend == "library" and x2.shape[0] > 0 and self._cpu_inference(x2):
            plan = self._infer_plan()
            y = plan.run(x2, self.bias)
            self.infer_kernel = plan.kernel
            return y.to(x.dtype).reshape(*shape[:-1], self.out_features)
        if self.backend == "torch" or x2.shape[0] == 0:
            y = self._torch_forward(x2)
        else:
            y = _BLRFunction.apply(x2, self.h, self.l, self.g, self)
        y = y.to(x.dtype)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y.reshape(*shape[:-1], self.out_features)

    def _cpu_inference(self, x2):
        """Whether this forward takes the CPU inference plan: input and module on the
        CPU, an f32/f16/bf16 input, and no autograd graph to record (grad mode off, or
        neither x nor any parameter requiring grad): the plan has no backward."""
        if x2.device.type != "cpu" or self.h.device.type != "cpu":
            return False
        if x2.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            return False
        if torch.is_grad_enabled():
            params = [self.h, self.l, self.g] + ([self.bias] if self.bias is not None else [])
            if x2.requires_grad or any(p.requires_grad for p in params):
                return False
        return True

    def _infer_plan(self):
        """The CPU inference plan of the parameters as they are now: rebuilt when any
        of u, v, h, l, g was modified (its version counter: in-place writes, copy_,
        optimizer steps) or replaced (its storage)."""
        key = tuple((t._version, t.data_ptr(), tuple(t.shape), t.dtype)
                    for t in (self.u, self.v, self.h, self.l, self.g))
        plan = getattr(self, "_infer", None)
        if plan is not None and plan.key == key:
            return plan
        if plan is not None:
            plan.free()
        self._infer = None
        self._infer = _InferPlan(self, key)
        return self._infer

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


class _InferPlan:
    """A library CPU inference plan (br_blr_infer) of one module's parameters. The
    plan holds its own copy of the signs and scales; a run writes the plan's scratch,
    so runs of one plan are serialized (ctypes lets other Python threads run meanwhile).
    `calls` counts plans built and runs (tests check which path ran)."""
    calls = {"build": 0, "run": 0}

    def __init__(self, mod, key):
        self.key = key
        self.ctx = _lib.context("cpu")
        self.lib = self.ctx._lib
        self.m, self.n = mod.out_features, mod.in_features
        self.ptr = None
        self.lock = threading.Lock()
        host = _lib.BlrHost(m=self.m, n=self.n, r=mod.rank, paths=mod.paths)
        keep = []
        u32 = ctypes.POINTER(ctypes.c_uint32)
        f32 = ctypes.POINTER(ctypes.c_float)
        for p in range(mod.paths):
            arrays = (layout.words32(mod.u[p].detach(), mod.rank).contiguous(),
                      layout.words32(mod.v[p].detach(), mod.rank).contiguous(),
                      mod.h.detach()[p].float().contiguous(),
                      mod.l.detach()[p].float().contiguous(),
                      mod.g.detach()[p].float().contiguous())
            keep += arrays
            hp = host.path[p]
            hp.bits_u = ctypes.cast(arrays[0].data_ptr(), u32)
            hp.bits_v = ctypes.cast(arrays[1].data_ptr(), u32)
            hp.h = ctypes.cast(arrays[2].data_ptr(), f32)
            hp.l = ctypes.cast(arrays[3].data_ptr(), f32)
            hp.g = ctypes.cast(arrays[4].data_ptr(), f32)
        ptr = _lib.P()
        self.ctx.check(self.lib.br_blr_infer_new(self.ctx.ptr, ctypes.byref(host),
                                                 ctypes.byref(ptr)))
        del keep  # the plan copied what it needs
        self.ptr = ptr
        self.kernel = self.lib.br_blr_infer_kernel(ptr).decode()
        _InferPlan.calls["build"] += 1

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

    def free(self):
        if getattr(self, "ptr", None):
            self.lib.br_blr_infer_free(self.ptr)
            self.ptr = None

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass


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
            self.ctx.set_stream(torch.cuda.current_stream(self.device).cuda_stream)

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
