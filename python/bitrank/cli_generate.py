"""`python -m bitrank generate COMPRESSED --prompt TEXT`: greedy text generation with a
compressed causal LM (bitrank.load, packed with bitrank.pack_for_inference), its speed
and the bytes its weights take; with --compare-fp16 ORIGINAL the original model runs
the same prompt through the same harness beside it.

Both models generate through transformers' generate (greedy, the model's own KV
cache), after one short warm-up generation that is not timed (the first call pays for
plan scratch, cuBLAS handles and kernel loading). The time is the whole call, the
prompt's prefill included; it is split into the first token (prefill) and the tokens
after it (decode) by a second, one-token generation. With --compile both models run
with a static KV cache and their forward compiled by torch.compile (fullgraph; CUDA
graphs on a GPU), what transformers' fast generation path does; the compiling
happens in untimed warm-up calls of each timed call's shape. At batch 1 the decode
steps of a small model are bound by Python and kernel launches, not by the weights
(each layer is one or two library calls per token): bench/bench_generate.py measures
the weights' own speed with CUDA graphs.
"""
import json
import os
import sys
import time


class UserError(Exception):
    """A mistake reported in one line."""


DTYPES = ("auto", "float16", "bfloat16", "float32")


def _positive(text):
    import argparse
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not positive")
    return value


def add_arguments(p):
    p.description = ("Greedy generation with a compressed causal LM: the text, tokens/s and "
                     "weight memory; with --compare-fp16 the original model beside it.")
    p.add_argument("model", metavar="COMPRESSED",
                   help="the compressed model (bitrank compress / save_pretrained output)")
    p.add_argument("--prompt", default="The King James Bible begins:",
                   help="the prompt (default: %(default)r)")
    p.add_argument("--max-new-tokens", type=_positive, default=64, metavar="N",
                   help="tokens to generate (default 64; fewer when the model ends the text)")
    p.add_argument("--ignore-eos", action="store_true",
                   help="generate all N tokens (the end-of-text token is suppressed: for "
                        "timing)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default)")
    p.add_argument("--dtype", choices=DTYPES, default="auto",
                   help="the activations and the uncompressed weights: auto = float16 on a "
                        "GPU, float32 on the CPU")
    p.add_argument("--compare-fp16", metavar="ORIGINAL_DIR",
                   help="also run the original transformers model (in --dtype) on the same "
                        "prompt and print both")
    p.add_argument("--tokenizer", metavar="DIR",
                   help="the tokenizer's directory (default: COMPRESSED, else ORIGINAL_DIR)")
    p.add_argument("--no-pack", action="store_true",
                   help="keep the compressed layers trainable modules (no "
                        "pack_for_inference: their training state stays on the device)")
    p.add_argument("--compile", action="store_true",
                   help="a static KV cache and the models' forward through torch.compile "
                        "(fullgraph; CUDA graphs on a GPU), compiled in untimed warm-up calls")
    p.add_argument("--json", metavar="OUT", help="also write the results to this file")


def _resolve_device(name):
    import torch
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"--device {name}: not a device (cpu, cuda, cuda:N or auto)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"--device {name}: torch sees no CUDA GPU")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UserError(f"--device {name}: there are {torch.cuda.device_count()} GPUs")
    elif device.type != "cpu":
        raise UserError(f"--device {name}: only cpu and cuda run here")
    return device


def _tokenizer(args):
    import transformers
    candidates = [args.tokenizer] if args.tokenizer else [args.model, args.compare_fp16]
    errors = []
    for path in candidates:
        if not path:
            continue
        try:
            return transformers.AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError, TypeError) as e:
            errors.append(f"{path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    raise UserError("no tokenizer found (pass --tokenizer DIR): " + "; ".join(errors))


def _sync(device):
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _compile(model, device):
    """The model's forward through torch.compile: one graph for the whole forward (a
    BLRLinear is one bitrank::blr_linear operator in it), CUDA graphs on a GPU."""
    import torch
    mode = "reduce-overhead" if device.type == "cuda" else None
    torch.compiler.reset()  # the other model's graphs (each shape is a recompile)
    model.forward = torch.compile(model.forward, fullgraph=True, dynamic=False, mode=mode)


def _timed_generate(model, tok, prompt, n, device, ignore_eos, compiled=False):
    """(prompt tokens, new token ids, seconds of the whole call, seconds of a one-token
    call, seconds of the untimed warm-up calls). Compiled: a static KV cache, and each
    timed call comes after an untimed one of the same shape (which compiles)."""
    import torch
    import transformers
    enc = tok(prompt, return_tensors="pt")
    ids = enc["input_ids"].to(device)
    mask = enc.get("attention_mask")
    mask = mask.to(device) if mask is not None else torch.ones_like(ids)
    if ids.shape[1] == 0:
        raise UserError("the prompt has no tokens")
    eos = tok.eos_token_id
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos

    def run(k):
        cfg = transformers.GenerationConfig(max_new_tokens=k, do_sample=False,
                                            eos_token_id=eos, pad_token_id=pad,
                                            min_new_tokens=k if ignore_eos else None,
                                            cache_implementation="static" if compiled else None)
        _sync(device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
        _sync(device)
        return out[0, ids.shape[1]:].tolist(), time.perf_counter() - t0

    t0 = time.perf_counter()
    if compiled:  # every shape the timed calls have (the static cache's length is the call's)
        run(1)
        run(n)
    else:
        run(min(2, n))  # plan scratch, cuBLAS handles, kernel loading
    warm = time.perf_counter() - t0
    _, first = run(1)
    tokens, seconds = run(n)
    return ids.shape[1], tokens, seconds, first, warm


def _weight_bytes(model):
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        if t.numel() and t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        total += t.numel() * t.element_size()
    return total


def _result(name, tok, prompt_tokens, tokens, seconds, first, warm, compiled):
    n = len(tokens)
    decode = (n - 1) / (seconds - first) if n > 1 and seconds > first else None
    return {"model": name, "prompt_tokens": prompt_tokens, "new_tokens": n, "tokens": tokens,
            "text": tok.decode(tokens, skip_special_tokens=True), "seconds": seconds,
            "tokens_per_s": n / seconds if seconds > 0 else None,
            "first_token_s": first, "decode_tokens_per_s": decode, "compiled": compiled,
            "warmup_s": warm}


def _print_run(title, r, memory_line):
    print(f"== {title}")
    print(r["text"])
    speed = f"{r['tokens_per_s']:.1f} tokens/s" if r["tokens_per_s"] else "-"
    line = (f"  {r['new_tokens']} new tokens after {r['prompt_tokens']} prompt tokens in "
            f"{r['seconds']:.3f} s: {speed} (first token {1e3 * r['first_token_s']:.1f} ms")
    if r["decode_tokens_per_s"]:
        line += f", then {r['decode_tokens_per_s']:.1f} tokens/s"
    if r["compiled"]:
        line += f"; compiled, warm-up {r['warmup_s']:.1f} s"
    print(line + ")")
    print(f"  {memory_line}")


def run(args):
    for path, what in ((args.model, "COMPRESSED"), (args.compare_fp16, "--compare-fp16"),
                       (args.tokenizer, "--tokenizer")):
        if path is not None and not os.path.exists(path):
            raise UserError(f"{path}: no such file or directory ({what})")
    if args.json:
        parent = os.path.dirname(os.path.abspath(args.json))
        if not os.path.isdir(parent):
            raise UserError(f"{args.json}: directory {parent} does not exist (--json)")
    import torch
    import transformers
    import bitrank
    from bitrank import _lib
    from bitrank.inference import human_bytes
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    device = _resolve_device(args.device)
    dtype = {"auto": torch.float16 if device.type == "cuda" else torch.float32,
             "float16": torch.float16, "bfloat16": torch.bfloat16,
             "float32": torch.float32}[args.dtype]
    tok = _tokenizer(args)
    try:
        model = bitrank.load(args.model, device=device, dtype=dtype)
    except (ValueError, FileNotFoundError) as e:
        raise UserError(f"{args.model}: {e}") from None
    can_generate = getattr(model, "can_generate", None)
    if not (callable(can_generate) and can_generate()):
        raise UserError(f"{args.model}: {type(model).__name__} does not generate text (not a "
                        "causal LM)")
    model.eval()
    notes = []
    if device.type == "cuda" and not args.no_pack and not _lib.has_cuda_infer():
        notes.append(f"{_lib.library_path()} has no CUDA inference plan: the compressed "
                     "layers run the library's training forward (slower), not packed")
    elif not args.no_pack:
        bitrank.pack_for_inference(model, device)
    if args.compile:
        _compile(model, device)
    prompt_tokens, tokens, seconds, first, warm = _timed_generate(
        model, tok, args.prompt, args.max_new_tokens, device, args.ignore_eos, args.compile)
    kernels = sorted({m.infer_kernel for m in model.modules()
                      if isinstance(m, bitrank.BLRLinear) and m.infer_kernel})
    mem = bitrank.inference_memory(model)  # again: the plans' scratch is sized by now
    res = _result(args.model, tok, prompt_tokens, tokens, seconds, first, warm, args.compile)
    res.update(device=str(device), dtype=str(dtype).replace("torch.", ""),
               kernels=kernels, memory=mem.to_dict(), weight_bytes=mem.total_bytes)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    how = ("packed" if mem.packed else "not packed") + \
        (f", kernels {', '.join(kernels)}" if kernels else "")
    _print_run(f"compressed: {args.model} on {device}, {res['dtype']} ({how})", res,
               f"weights {human_bytes(mem.total_bytes)} ({human_bytes(mem.linear_bytes)} "
               f"in the compressed layers); fp16 equivalent {human_bytes(mem.total_fp16_bytes)}"
               f" ({mem.total_ratio:.2f}x smaller)")
    out = {"compressed": res}
    if args.compare_fp16:
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
        from bitrank.cli_compress import load_original
        try:
            orig, _ = load_original(args.compare_fp16, dtype)
        except OSError as e:
            raise UserError(f"{args.compare_fp16}: {str(e).splitlines()[0]}") from None
        orig = orig.to(device).eval()
        if args.compile:
            _compile(orig, device)
        o_prompt, o_tokens, o_seconds, o_first, o_warm = _timed_generate(
            orig, tok, args.prompt, args.max_new_tokens, device, args.ignore_eos, args.compile)
        ref = _result(args.compare_fp16, tok, o_prompt, o_tokens, o_seconds, o_first, o_warm,
                      args.compile)
        ref.update(device=str(device), dtype=res["dtype"], weight_bytes=_weight_bytes(orig))
        _print_run(f"original: {args.compare_fp16} on {device}, {ref['dtype']}", ref,
                   f"weights {human_bytes(ref['weight_bytes'])}")
        same = 0
        for a, b in zip(tokens, o_tokens):
            if a != b:
                break
            same += 1
        speed = (res["tokens_per_s"] / ref["tokens_per_s"]
                 if res["tokens_per_s"] and ref["tokens_per_s"] else float("nan"))
        mem_ratio = ref["weight_bytes"] / res["weight_bytes"] if res["weight_bytes"] else 0.0
        print(f"== compressed vs original: {speed:.2f}x the tokens/s, weights "
              f"{mem_ratio:.2f}x smaller; the greedy tokens agree for the first {same} of "
              f"{min(len(tokens), len(o_tokens))}")
        out.update(original=ref, speedup=speed, memory_ratio=mem_ratio, agree_tokens=same)
    if args.json:
        try:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
        except OSError as e:
            raise UserError(f"{args.json}: cannot write: {e.strerror or e}") from None
    return 0
