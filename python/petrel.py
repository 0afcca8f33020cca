"""petrel.py: the C API of libpetrel (include/petrel.h) from Python, with ctypes only.

    import petrel
    model = petrel.Model("story-f32.gguf")
    ctx = model.context()
    text = ctx.generate("Once upon a time", max_tokens=32, temperature=0)
    for piece in ctx.stream(" The end.", max_tokens=16): print(piece, end="")

The library is found from $PETREL_LIBRARY (a path to libpetrel.so), else by the loader
(ctypes.util.find_library("petrel")). Errors raise petrel.Error with the library's message.
"""
import ctypes
import ctypes.util
import os

OK = 0
ERR_CANCELLED = 5

_STATUS_NAMES = {
    0: "OK", 1: "INVALID_ARGUMENT", 2: "IO", 3: "FORMAT", 4: "BUFFER_TOO_SMALL",
    5: "CANCELLED", 6: "STATE", 7: "OUT_OF_MEMORY", 8: "BACKEND", 9: "INTERNAL",
}
STOP_REASONS = {0: "none", 1: "eos", 2: "length", 3: "context", 4: "cancelled"}
SEED_RANDOM = 2**64 - 1


class Error(RuntimeError):
    """A petrel call failed: `status` is the petrel_status name, the message says why."""

    def __init__(self, status, message):
        super().__init__(f"{_STATUS_NAMES.get(status, status)}: {message}")
        self.status = _STATUS_NAMES.get(status, str(status))


class _ModelParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("device", ctypes.c_char_p),
                ("gpu_layers", ctypes.c_int32), ("reserved", ctypes.c_uint32)]


class _ContextParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("n_threads", ctypes.c_uint32),
                ("context", ctypes.c_uint32), ("batch_tokens", ctypes.c_uint32),
                ("kv_type", ctypes.c_int)]


class _SamplingParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("max_tokens", ctypes.c_int32),
                ("temperature", ctypes.c_float), ("top_k", ctypes.c_int32),
                ("top_p", ctypes.c_float), ("min_p", ctypes.c_float),
                ("repeat_penalty", ctypes.c_float), ("seed", ctypes.c_uint64),
                ("ignore_eos", ctypes.c_int32), ("add_bos", ctypes.c_int32)]


class _GenerateResult(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("n_prompt_tokens", ctypes.c_size_t),
                ("n_generated_tokens", ctypes.c_size_t), ("stop_reason", ctypes.c_int)]


_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_char), ctypes.c_size_t,
                             ctypes.c_void_p)


def _load_library():
    path = os.environ.get("PETREL_LIBRARY") or ctypes.util.find_library("petrel")
    if not path:
        raise OSError("libpetrel not found: set PETREL_LIBRARY to the path of libpetrel.so")
    lib = ctypes.CDLL(path)
    p = ctypes.POINTER
    signatures = {
        "petrel_version": (ctypes.c_char_p, []),
        "petrel_last_error": (ctypes.c_char_p, []),
        "petrel_model_default_params": (_ModelParams, []),
        "petrel_context_default_params": (_ContextParams, []),
        "petrel_sampling_default_params": (_SamplingParams, []),
        "petrel_model_load": (ctypes.c_int, [ctypes.c_char_p, p(_ModelParams), p(ctypes.c_void_p)]),
        "petrel_model_free": (None, [ctypes.c_void_p]),
        "petrel_model_n_vocab": (ctypes.c_int32, [ctypes.c_void_p]),
        "petrel_tokenize": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                           ctypes.c_uint32, p(ctypes.c_int32), ctypes.c_size_t,
                                           p(ctypes.c_size_t)]),
        "petrel_detokenize": (ctypes.c_int, [ctypes.c_void_p, p(ctypes.c_int32), ctypes.c_size_t,
                                             ctypes.c_uint32, ctypes.c_char_p, ctypes.c_size_t,
                                             p(ctypes.c_size_t)]),
        "petrel_context_new": (ctypes.c_int, [ctypes.c_void_p, p(_ContextParams),
                                              p(ctypes.c_void_p)]),
        "petrel_context_free": (None, [ctypes.c_void_p]),
        "petrel_context_reset": (ctypes.c_int, [ctypes.c_void_p]),
        "petrel_generate": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                           p(_SamplingParams), _CALLBACK, ctypes.c_void_p,
                                           p(_GenerateResult)]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    return lib


_lib = None


def library():
    """The loaded libpetrel (loaded on first use)."""
    global _lib
    if _lib is None:
        _lib = _load_library()
    return _lib


def version():
    return library().petrel_version().decode()


def _check(status):
    if status != OK:
        raise Error(status, library().petrel_last_error().decode(errors="replace"))


class Model:
    """A loaded model; shared read-only by its contexts. Closed by close() or `with`."""

    def __init__(self, path, device=None, gpu_layers=-1):
        lib = library()
        params = lib.petrel_model_default_params()
        params.device = device.encode() if device else None
        params.gpu_layers = gpu_layers
        self._handle = ctypes.c_void_p()
        _check(lib.petrel_model_load(os.fsencode(path), ctypes.byref(params),
                                     ctypes.byref(self._handle)))

    def close(self):
        if self._handle:
            library().petrel_model_free(self._handle)
            self._handle = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    @property
    def n_vocab(self):
        return library().petrel_model_n_vocab(self._handle)

    def tokenize(self, text, add_special=True):
        data = text.encode()
        n = ctypes.c_size_t()
        flags = 1 if add_special else 0
        status = library().petrel_tokenize(self._handle, data, len(data), flags, None, 0,
                                           ctypes.byref(n))
        if status not in (OK, 4):
            _check(status)
        ids = (ctypes.c_int32 * max(n.value, 1))()
        _check(library().petrel_tokenize(self._handle, data, len(data), flags, ids, n.value,
                                         ctypes.byref(n)))
        return list(ids[:n.value])

    def detokenize(self, ids, special=False):
        array = (ctypes.c_int32 * max(len(ids), 1))(*ids)
        n = ctypes.c_size_t()
        flags = 1 if special else 0
        status = library().petrel_detokenize(self._handle, array, len(ids), flags, None, 0,
                                             ctypes.byref(n))
        if status not in (OK, 4):
            _check(status)
        out = ctypes.create_string_buffer(n.value + 1)
        _check(library().petrel_detokenize(self._handle, array, len(ids), flags, out,
                                           n.value + 1, ctypes.byref(n)))
        return out.raw[:n.value].decode(errors="replace")

    def context(self, **params):
        return Context(self, **params)


class Context:
    """One conversation's KV cache; use it from one thread at a time."""

    def __init__(self, model, n_threads=0, context=0, batch_tokens=512):
        lib = library()
        params = lib.petrel_context_default_params()
        params.n_threads = n_threads
        params.context = context
        params.batch_tokens = batch_tokens
        self._model = model  # the model outlives its contexts
        self._handle = ctypes.c_void_p()
        _check(lib.petrel_context_new(model._handle, ctypes.byref(params),
                                      ctypes.byref(self._handle)))
        self.stop_reason = None

    def close(self):
        if self._handle:
            library().petrel_context_free(self._handle)
            self._handle = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def reset(self):
        _check(library().petrel_context_reset(self._handle))

    def generate(self, prompt, on_text=None, **sampling):
        """Generates and returns the text; `on_text(piece)` returning True cancels."""
        pieces = []

        def collect(piece):
            pieces.append(piece)
            return on_text(piece) if on_text else False

        self._run(prompt, collect, sampling)
        return b"".join(pieces).decode(errors="replace")

    def stream(self, prompt, **sampling):
        """The text as a list of byte pieces, one per callback."""
        pieces = []
        self._run(prompt, lambda piece: pieces.append(piece) or False, sampling)
        return pieces

    def _run(self, prompt, on_piece, sampling):
        lib = library()
        params = lib.petrel_sampling_default_params()
        for name, value in sampling.items():
            if not hasattr(params, name):
                raise TypeError(f"unknown sampling parameter {name!r}")
            setattr(params, name, value)
        result = _GenerateResult(struct_size=ctypes.sizeof(_GenerateResult))

        def callback(text, length, _user):
            return 1 if on_piece(ctypes.string_at(text, length)) else 0

        data = prompt.encode()
        status = lib.petrel_generate(self._handle, data, len(data), ctypes.byref(params),
                                     _CALLBACK(callback), None, ctypes.byref(result))
        self.stop_reason = STOP_REASONS.get(result.stop_reason, "none")
        if status != ERR_CANCELLED:
            _check(status)
