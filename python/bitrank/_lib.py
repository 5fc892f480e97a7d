"""ctypes bindings of the C library (include/bitrank.h).

The library is found, in order, at $BITRANK_LIBRARY, beside this file (an installed
package ships it there), or in the source tree's build directories (build/, build-cpu/)
for a development checkout. Every call's status is checked: a status other than BR_OK
raises BitrankError with the library's message (the library itself never aborts).

The structs the bindings pass by pointer are mirrored here with ctypes; their sizes
are checked against the library's br_struct_size when it is loaded, so a header that
changed without this file refuses to load instead of corrupting memory.
"""
import ctypes
import os
import threading

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))

BR_OK = 0
BR_E_UNSUPPORTED = 8
STATUS_NAMES = ["BR_OK", "BR_E_ARG", "BR_E_SHAPE", "BR_E_DTYPE", "BR_E_SIZE", "BR_E_OVERFLOW",
                "BR_E_NOMEM", "BR_E_DEVICE", "BR_E_UNSUPPORTED", "BR_E_IO", "BR_E_FORMAT",
                "BR_E_NONFINITE", "BR_E_STATE"]

BR_F32, BR_F16, BR_U32 = 0, 1, 2

# br_blr_part
(BLR_H, BLR_L, BLR_G, BLR_DH, BLR_DL, BLR_DG, BLR_BITS_U, BLR_BITS_V, BLR_GU, BLR_GV,
 BLR_SUM_A2, BLR_SUM_X2) = range(12)
# br_blr_new's flags
BLR_SIGN_GRADS, BLR_CURVATURE = 1, 2

# br_sign_mode
SIGN_OFF, SIGN_LATENT, SIGN_EXACT = 0, 1, 2

# br_infer_kernel (CPU inference plans)
INFER_AUTO, INFER_PORTABLE, INFER_AVX2 = 0, 1, 2

# br_act_type (CUDA inference plans: the activations' dtype)
ACT_F16, ACT_BF16 = 0, 1

c_size_t = ctypes.c_size_t
c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p


class BitrankError(RuntimeError):
    """A failed library call: `status` is the br_status name, the text its message."""

    def __init__(self, status, message):
        self.status = status
        super().__init__(f"{message} ({status})" if message else status)


class TokenErr(ctypes.Structure):
    _fields_ = [("p50", ctypes.c_double), ("p90", ctypes.c_double), ("p99", ctypes.c_double)]


class CompressOpts(ctypes.Structure):
    _fields_ = [
        ("bpw", ctypes.c_double),
        ("rank", c_size_t),
        ("paths", c_size_t),
        ("include", ctypes.POINTER(c_char_p)),
        ("n_include", c_size_t),
        ("exclude", ctypes.POINTER(c_char_p)),
        ("n_exclude", c_size_t),
        ("activations", c_char_p),
        ("gram", c_char_p),
        ("synthetic", ctypes.c_int),
        ("allow_uncalibrated", ctypes.c_int),
        ("weight_term", ctypes.c_float),
        ("token_weighting", ctypes.c_int),
        ("steps", ctypes.c_int),
        ("tokens", c_size_t),
        ("lr", ctypes.c_float),
        ("sign_lr", ctypes.c_float),
        ("warmup", ctypes.c_int),
        ("patience", ctypes.c_int),
        ("eval_every", ctypes.c_int),
        ("eval_tokens", c_size_t),
        ("seed", ctypes.c_uint64),
        ("init_on_device", ctypes.c_int),
    ]


class LayerReport(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 256),
        ("m", c_size_t), ("n", c_size_t), ("rank", c_size_t), ("paths", c_size_t),
        ("bpw", ctypes.c_double),
        ("outcome", ctypes.c_int),
        ("note", ctypes.c_char * 256),
        ("err_init", ctypes.c_double), ("err_trained", ctypes.c_double),
        ("tok_init", TokenErr), ("tok_trained", TokenErr),
        ("weight_err_init", ctypes.c_double),
        ("weight_err", ctypes.c_double),
        ("steps", ctypes.c_int),
        ("stop", ctypes.c_int),
        ("best_step", ctypes.c_int),
        ("loss_every", ctypes.c_int),
        ("n_loss", c_size_t),
        ("loss", ctypes.POINTER(ctypes.c_float)),
        ("eval_every", ctypes.c_int),
        ("n_eval", c_size_t),
        ("eval", ctypes.POINTER(ctypes.c_float)),
        ("seconds", ctypes.c_double),
        ("init_seconds", ctypes.c_double),
        ("resumed", ctypes.c_int),
        ("init_device", ctypes.c_char * 16),
        ("init_kind", ctypes.c_char * 16),
        ("calibration", ctypes.c_char * 32),
        ("calib_tokens", c_size_t),
    ]


class BlrPathHost(ctypes.Structure):
    _fields_ = [("bits_u", ctypes.POINTER(ctypes.c_uint32)),
                ("bits_v", ctypes.POINTER(ctypes.c_uint32)),
                ("h", ctypes.POINTER(ctypes.c_float)),
                ("l", ctypes.POINTER(ctypes.c_float)),
                ("g", ctypes.POINTER(ctypes.c_float))]


class BlrHost(ctypes.Structure):
    _fields_ = [("m", c_size_t), ("n", c_size_t), ("r", c_size_t), ("paths", c_size_t),
                ("path", BlrPathHost * 2)]


class OptCfg(ctypes.Structure):
    _fields_ = [
        ("lr", ctypes.c_float), ("beta1", ctypes.c_float), ("beta2", ctypes.c_float),
        ("eps", ctypes.c_float), ("rel_floor", ctypes.c_float * 3), ("freeze", ctypes.c_int * 3),
        ("max_grad_norm", ctypes.c_float),
        ("sign_mode", ctypes.c_int), ("sign_factored", ctypes.c_int),
        ("sign_lr", ctypes.c_float), ("sign_beta1", ctypes.c_float),
        ("sign_beta2", ctypes.c_float), ("sign_eps", ctypes.c_float),
        ("sign_clamp", ctypes.c_float), ("sign_hyst", ctypes.c_float),
        ("sign_tau", ctypes.c_float), ("flip_budget", ctypes.c_float),
        ("curvature", ctypes.c_float),
    ]


class BlrFwd(ctypes.Structure):
    """br_blr_fwd: what one br_blr_forward computes (input, target, output)."""
    _fields_ = [("x", c_void_p), ("x16", c_void_p), ("target", c_void_p),
                ("alpha", ctypes.c_float), ("gscale", ctypes.c_float), ("out", c_void_p),
                ("ntok", c_size_t)]


_MIRRORS = {"br_compress_opts": CompressOpts, "br_layer_report": LayerReport,
            "br_blr_host": BlrHost, "br_blr_path_host": BlrPathHost,
            "br_token_err": TokenErr, "br_opt_cfg": OptCfg, "br_blr_fwd": BlrFwd}

P = c_void_p
# name: (restype, argtypes); restype int = a br_status
_SIGS = {
    "br_status_name": (c_char_p, [ctypes.c_int]),
    "br_struct_size": (c_size_t, [c_char_p]),
    "br_ctx_new": (ctypes.c_int, [c_char_p, ctypes.POINTER(P), ctypes.c_char_p, c_size_t]),
    "br_ctx_free": (None, [P]),
    "br_ctx_backend": (c_char_p, [P]),
    "br_ctx_device": (c_char_p, [P]),
    "br_ctx_error": (c_char_p, [P]),
    "br_ctx_clear_error": (None, [P]),
    "br_ctx_sync": (ctypes.c_int, [P]),
    "br_ctx_set_stream": (ctypes.c_int, [P, P]),
    "br_ctx_use_own_stream": (ctypes.c_int, [P]),
    "br_buf_wrap": (ctypes.c_int, [P, ctypes.c_int, P, c_size_t, ctypes.POINTER(P)]),
    "br_buf_new": (ctypes.c_int, [P, ctypes.c_int, c_size_t, ctypes.POINTER(P)]),
    "br_buf_free": (None, [P]),
    "br_buf_copy": (ctypes.c_int, [P, c_size_t, P, c_size_t, c_size_t]),
    "br_blr_new": (ctypes.c_int, [P, c_size_t, c_size_t, c_size_t, c_size_t, ctypes.c_uint,
                                  ctypes.POINTER(P)]),
    "br_blr_free": (None, [P]),
    "br_blr_buf": (P, [P, c_size_t, ctypes.c_int]),
    "br_blr_zero_grad": (ctypes.c_int, [P]),
    "br_blr_scratch_new": (ctypes.c_int, [P, c_size_t, P, ctypes.POINTER(P)]),
    "br_blr_scratch_free": (None, [P]),
    "br_blr_forward": (ctypes.c_int, [P, P, ctypes.POINTER(BlrFwd)]),
    "br_blr_backward": (ctypes.c_int, [P, P, P, P, P, c_size_t, ctypes.c_float, ctypes.c_int]),
    "br_opt_defaults": (OptCfg, []),
    "br_blr_opt_new": (ctypes.c_int, [P, ctypes.POINTER(OptCfg), ctypes.POINTER(P)]),
    "br_blr_opt_free": (None, [P]),
    "br_blr_opt_init_latent": (ctypes.c_int, [P, c_size_t, ctypes.c_int, P]),
    "br_blr_opt_set_lr": (ctypes.c_int, [P, ctypes.c_float, ctypes.c_float]),
    "br_blr_opt_step": (ctypes.c_int, [P]),
    "br_blr_bpw": (ctypes.c_double, [c_size_t, c_size_t, c_size_t, c_size_t]),
    "br_compress_rank": (ctypes.c_int, [P, c_char_p, c_size_t, c_size_t, c_size_t,
                                        ctypes.c_double, ctypes.POINTER(c_size_t)]),
    "br_compress_opts_default": (None, [ctypes.POINTER(CompressOpts)]),
    "br_compress_matrix": (ctypes.c_int, [P, c_char_p, P, c_size_t, c_size_t, P, c_size_t, P,
                                          ctypes.POINTER(CompressOpts), ctypes.POINTER(BlrHost),
                                          ctypes.POINTER(LayerReport)]),
    "br_blr_host_free": (None, [ctypes.POINTER(BlrHost)]),
    "br_blr_infer_new": (ctypes.c_int, [P, ctypes.POINTER(BlrHost), ctypes.POINTER(P)]),
    "br_blr_infer_set_kernel": (ctypes.c_int, [P, ctypes.c_int]),
    "br_blr_infer_kernel": (c_char_p, [P]),
    "br_blr_infer_run": (ctypes.c_int, [P, P, c_size_t, P, P]),
    "br_blr_infer_free": (None, [P]),
}

# Functions a library build may lack: bound when present, and the features that need
# them report themselves unavailable otherwise (has()). The CUDA inference plan
# (br_blr_infer_cuda_*) is only in builds with it; a CPU-only or older library still
# loads, and BLRLinear keeps its other paths.
_OPTIONAL_SIGS = {
    "br_ctx_stream": (P, [P]),
    "br_blr_infer_cuda_new": (ctypes.c_int, [P, ctypes.POINTER(BlrHost), ctypes.POINTER(P)]),
    "br_blr_infer_cuda_run": (ctypes.c_int, [P, ctypes.c_int, P, c_size_t, P, P]),
    "br_blr_infer_cuda_bytes": (c_size_t, [P]),
    "br_blr_infer_cuda_kernel": (c_char_p, [P]),
    "br_blr_infer_cuda_free": (None, [P]),
}
CUDA_INFER = ("br_blr_infer_cuda_new", "br_blr_infer_cuda_run", "br_blr_infer_cuda_bytes",
              "br_blr_infer_cuda_kernel", "br_blr_infer_cuda_free")

_lib = None
_absent = set()  # the optional functions the loaded library lacks
_lock = threading.Lock()


def library_path():
    """Where the shared library is taken from (the first that exists)."""
    env = os.environ.get("BITRANK_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise BitrankError("BR_E_IO", f"BITRANK_LIBRARY={env}: no such file")
        return env
    for cand in (os.path.join(_HERE, "libbitrank.so"),
                 os.path.join(_REPO, "build", "libbitrank.so"),
                 os.path.join(_REPO, "build-cpu", "libbitrank.so")):
        if os.path.isfile(cand):
            return cand
    raise BitrankError("BR_E_IO", "libbitrank.so not found: install the package (pip install .) "
                       "or build the library (cmake --build build --target bitrank_shared) "
                       "or set BITRANK_LIBRARY")


def lib():
    """The loaded library, its functions typed (loaded once)."""
    global _lib
    with _lock:
        if _lib is None:
            handle = ctypes.CDLL(library_path())
            for name, (res, args) in _SIGS.items():
                fn = getattr(handle, name)
                fn.restype = res
                fn.argtypes = args
            for name, (res, args) in _OPTIONAL_SIGS.items():
                try:
                    fn = getattr(handle, name)
                except AttributeError:
                    _absent.add(name)
                    continue
                fn.restype = res
                fn.argtypes = args
            for cname, mirror in _MIRRORS.items():
                want = handle.br_struct_size(cname.encode())
                if want != ctypes.sizeof(mirror):
                    raise BitrankError("BR_E_STATE", f"{cname}: the library has {want} bytes, "
                                       f"the Python mirror {ctypes.sizeof(mirror)}: the bindings "
                                       "do not match this library build")
            _lib = handle
    return _lib


def has(*names):
    """Whether the loaded library has every one of the (optional) functions `names`."""
    lib()
    return not any(name in _absent for name in names)


def has_cuda_infer():
    """Whether the library has the CUDA inference plan (br_blr_infer_cuda_*). A plan
    also needs a CUDA context, which only a build with the CUDA backend makes."""
    return has(*CUDA_INFER)


def status_name(st):
    return STATUS_NAMES[st] if 0 <= st < len(STATUS_NAMES) else f"status {st}"


def check(st, ctx=None, what=""):
    """Raise BitrankError for a failed status, with the context's message."""
    if st == BR_OK:
        return
    msg = ""
    if ctx is not None:
        raw = lib().br_ctx_error(ctx)
        msg = raw.decode(errors="replace") if raw else ""
        lib().br_ctx_clear_error(ctx)
    if what and not msg:
        msg = what
    raise BitrankError(status_name(st), msg)


class Context:
    """A library context on one device ("cpu", "cuda:N"); freed with the object."""

    def __init__(self, device):
        self._lib = lib()
        self.device = device
        err = ctypes.create_string_buffer(512)
        ptr = P()
        st = self._lib.br_ctx_new(device.encode(), ctypes.byref(ptr), err, len(err))
        if st != BR_OK:
            raise BitrankError(status_name(st), err.value.decode(errors="replace"))
        self.ptr = ptr
        self.is_cuda = device.startswith("cuda")
        self.stream = None  # the handle last set by set_stream (None: the context's own)
        # held around a stream switch and the ops issued on that stream, so that two
        # threads sharing the context cannot issue on each other's stream
        self.lock = threading.RLock()

    def check(self, st, what=""):
        check(st, self.ptr, what)

    def set_stream(self, handle):
        """Run the context's ops on CUDA stream `handle` (an int, 0 = legacy default).
        A call with the stream already set costs nothing: the per-layer forwards of a
        model call it for every layer, and the library's switch (an event record and
        wait, or a host sync when a graph capture begins) is only needed on a change."""
        if handle == self.stream:
            return
        self.check(self._lib.br_ctx_set_stream(self.ptr, P(handle)))
        self.stream = handle

    def sync(self):
        self.check(self._lib.br_ctx_sync(self.ptr))

    def wrap(self, tensor, dtype):
        """A br_buf over a contiguous torch tensor's memory (not owned, no copy)."""
        return Buffer(self, tensor, dtype)

    def close(self):
        if getattr(self, "ptr", None):
            self._lib.br_ctx_free(self.ptr)
            self.ptr = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Buffer:
    """A wrapped caller tensor. Keeps the tensor alive as long as the handle."""

    def __init__(self, ctx, tensor, dtype):
        if not tensor.is_contiguous():
            raise ValueError("bitrank: a wrapped tensor must be contiguous")
        elsize = {BR_F32: 4, BR_F16: 2, BR_U32: 4}[dtype]
        nbytes = tensor.numel() * tensor.element_size()
        if nbytes % elsize:
            raise ValueError("bitrank: tensor bytes are not a whole number of elements")
        self.ctx = ctx
        self.tensor = tensor
        self.count = nbytes // elsize
        ptr = P()
        ctx.check(ctx._lib.br_buf_wrap(ctx.ptr, dtype, P(tensor.data_ptr()), self.count,
                                       ctypes.byref(ptr)))
        self.ptr = ptr

    def free(self):
        if getattr(self, "ptr", None):
            self.ctx._lib.br_buf_free(self.ptr)
            self.ptr = None

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass


_contexts = {}


def context(device):
    """The shared context of a torch device (one per device, made on first use)."""
    key = str(device)
    if key == "cuda":
        import torch
        key = f"cuda:{torch.cuda.current_device()}"
    with _lock:
        ctx = _contexts.get(key)
    if ctx is None:
        ctx = Context(key)
        with _lock:
            _contexts.setdefault(key, ctx)
            ctx = _contexts[key]
    return ctx
