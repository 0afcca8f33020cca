"""libpetrel through ctypes: finding and loading the library, the C structs, the functions'
signatures, and errors as exceptions (include/petrel/petrel.h)."""
import ctypes
import ctypes.util
import os

OK = 0
ERR_BUFFER_TOO_SMALL = 4
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


class ModelParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("device", ctypes.c_char_p),
                ("gpu_layers", ctypes.c_int32), ("reserved", ctypes.c_uint32)]


class ContextParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("n_threads", ctypes.c_uint32),
                ("context", ctypes.c_uint32), ("batch_tokens", ctypes.c_uint32),
                ("kv_type", ctypes.c_int), ("lora", ctypes.POINTER(ctypes.c_char_p)),
                ("n_lora", ctypes.c_size_t), ("n_sequences", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32)]


class SamplingParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("max_tokens", ctypes.c_int32),
                ("temperature", ctypes.c_float), ("top_k", ctypes.c_int32),
                ("top_p", ctypes.c_float), ("min_p", ctypes.c_float),
                ("repeat_penalty", ctypes.c_float), ("seed", ctypes.c_uint64),
                ("ignore_eos", ctypes.c_int32), ("add_bos", ctypes.c_int32),
                ("parse_special", ctypes.c_int32), ("reserved", ctypes.c_uint32)]


class GenerateResult(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("n_prompt_tokens", ctypes.c_size_t),
                ("n_generated_tokens", ctypes.c_size_t), ("stop_reason", ctypes.c_int)]


class ChatMessage(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_char), ctypes.c_size_t,
                            ctypes.c_void_p)

_p = ctypes.POINTER
_SIGNATURES = {
    "petrel_version": (ctypes.c_char_p, []),
    "petrel_last_error": (ctypes.c_char_p, []),
    "petrel_model_default_params": (ModelParams, []),
    "petrel_context_default_params": (ContextParams, []),
    "petrel_sampling_default_params": (SamplingParams, []),
    "petrel_model_load": (ctypes.c_int, [ctypes.c_char_p, _p(ModelParams), _p(ctypes.c_void_p)]),
    "petrel_model_free": (None, [ctypes.c_void_p]),
    "petrel_model_n_vocab": (ctypes.c_int32, [ctypes.c_void_p]),
    "petrel_tokenize": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                       ctypes.c_uint32, _p(ctypes.c_int32), ctypes.c_size_t,
                                       _p(ctypes.c_size_t)]),
    "petrel_detokenize": (ctypes.c_int, [ctypes.c_void_p, _p(ctypes.c_int32), ctypes.c_size_t,
                                         ctypes.c_uint32, ctypes.c_char_p, ctypes.c_size_t,
                                         _p(ctypes.c_size_t)]),
    "petrel_context_new": (ctypes.c_int, [ctypes.c_void_p, _p(ContextParams),
                                          _p(ctypes.c_void_p)]),
    "petrel_context_free": (None, [ctypes.c_void_p]),
    "petrel_context_reset": (ctypes.c_int, [ctypes.c_void_p]),
    "petrel_generate": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                       _p(SamplingParams), CALLBACK, ctypes.c_void_p,
                                       _p(GenerateResult)]),
    "petrel_chat_apply_template": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p,
                                                  _p(ChatMessage), ctypes.c_size_t, ctypes.c_int,
                                                  ctypes.c_char_p, ctypes.c_size_t,
                                                  _p(ctypes.c_size_t)]),
    "petrel_generate_chat": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, _p(ChatMessage),
                                            ctypes.c_size_t, _p(SamplingParams), CALLBACK,
                                            ctypes.c_void_p, _p(GenerateResult)]),
    "petrel_embed": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                    _p(ctypes.c_float), ctypes.c_size_t, _p(ctypes.c_size_t)]),
    "petrel_context_save": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
    "petrel_context_load": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
}


def _candidates():
    """Where libpetrel may be, in order: $PETREL_LIBRARY, beside the package (the package
    folder, then the folder holding it), the libdir of the install the package came with
    (_install_paths.py, written by `meson install`), then the system loader's search."""
    if os.environ.get("PETREL_LIBRARY"):
        yield os.environ["PETREL_LIBRARY"]
        return
    here = os.path.dirname(os.path.abspath(__file__))
    folders = [here, os.path.dirname(here)]
    try:
        from ._install_paths import LIBDIR_FROM_PACKAGE
        folders.append(os.path.normpath(os.path.join(here, LIBDIR_FROM_PACKAGE)))
    except ImportError:  # the source tree's package
        pass
    for folder in folders:
        for name in ("libpetrel.so", "libpetrel.so.0"):
            path = os.path.join(folder, name)
            if os.path.exists(path):
                yield path
    yield ctypes.util.find_library("petrel") or "libpetrel.so.0"


def _load_library():
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as error:
            tried.append(f"{path}: {error}")
    else:
        raise OSError("libpetrel not found (" + "; ".join(tried) +
                      "): set PETREL_LIBRARY to the path of libpetrel.so")
    for name, (restype, argtypes) in _SIGNATURES.items():
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


def check(status):
    if status != OK:
        raise Error(status, library().petrel_last_error().decode(errors="replace"))


def sampling_params(**fields):
    """petrel_sampling_params from the defaults and keyword fields (max_tokens=, seed=, ...)."""
    params = library().petrel_sampling_default_params()
    for name, value in fields.items():
        if name == "struct_size" or not hasattr(params, name):
            raise TypeError(f"unknown sampling parameter {name!r}")
        setattr(params, name, value)
    return params


def chat_messages(messages):
    """A ChatMessage array from [{"role": ..., "content": ...}, ...] (kept alive by the caller)."""
    array = (ChatMessage * max(len(messages), 1))()
    for i, message in enumerate(messages):
        array[i].role = message["role"].encode()
        array[i].content = message["content"].encode()
    return array


class Handle:
    """A C handle closed by close(), at the end of a `with` block, or when collected."""

    def close(self):
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()
