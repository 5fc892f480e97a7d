"""`python -m bitrank`: the Python package's command line.

    python -m bitrank eval COMPRESSED [--reference ORIGINAL_DIR] [--kind auto|encoder|causal]
        [--text FILE] [--device cpu|cuda|auto] [--seq-len N] [--max-tokens N] [--json OUT]
    python -m bitrank generate COMPRESSED [--prompt TEXT] [--max-new-tokens N]
        [--device cpu|cuda|auto] [--compare-fp16 ORIGINAL_DIR]   (bitrank.cli_generate)
    python -m bitrank compress ...   (bitrank.cli_compress, where installed)
    python -m bitrank demo ...       (bitrank.demo, where installed)

Each subcommand is a pair (add_arguments(parser), run(args) -> exit status) in
SUBCOMMANDS. A mistake of the user's (a missing file, a bad option, a missing
--reference) is one line on stderr and exit status 1, never a traceback.
"""
import argparse
import importlib
import json
import os
import sys


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 1."""

    def error(self, message):
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        sys.exit(1)


class UserError(Exception):
    """A one-line error for the user, raised by a subcommand's run."""


def _positive(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not positive")
    return value


# ------------------------------------------------------------------ eval

def add_eval_arguments(p):
    p.description = ("Quality of a compressed model on held-out text: perplexity for a causal "
                     "LM (and of the original, with --reference); for an encoder, sentence-"
                     "embedding fidelity against --reference (required).")
    p.add_argument("compressed", metavar="COMPRESSED",
                   help="the compressed model (what `bitrank compress` wrote; read by bitrank.load)")
    p.add_argument("--reference", metavar="ORIGINAL_DIR",
                   help="the original model's directory (required for an encoder)")
    p.add_argument("--kind", choices=["auto", "encoder", "causal"], default="auto",
                   help="auto: causal when the config's architectures name a CausalLM or "
                        "LMHead model, else encoder (default auto)")
    p.add_argument("--text", metavar="FILE",
                   help="a UTF-8 text file (default: the held-out fortunes); an encoder takes "
                        "sentences from its paragraphs")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default)")
    p.add_argument("--seq-len", type=_positive, metavar="N",
                   help="tokens per sentence (encoder, default 128) or per window (causal, "
                        "default 512)")
    p.add_argument("--stride", type=_positive, metavar="N",
                   help="causal: windows advance by N tokens (default: the window length)")
    p.add_argument("--max-tokens", type=_positive, metavar="N",
                   help="causal: read only the text's first N tokens")
    p.add_argument("--sentences", type=_positive, default=400, metavar="N",
                   help="encoder: held-out sentences to compare (default 400)")
    p.add_argument("--json", metavar="OUT", help="also write the results to this file")


def _print_eval(result, args):
    if result["kind"] == "causal":
        c, r = result["compressed"], result["reference"]
        print(f"{args.compressed}: perplexity on {result['text']}, {c['tokens']} predicted "
              f"tokens, windows of {result['seq_len']} (stride {result['stride']})")
        print(f"  compressed  ppl {c['ppl']:10.3f}  nll {c['nll']:.4f}")
        if r is not None:
            print(f"  reference   ppl {r['ppl']:10.3f}  nll {r['nll']:.4f}  ({args.reference})")
        return
    f = result["fidelity"]
    print(f"{args.compressed}: sentence-embedding fidelity against {args.reference} on "
          f"{result['text']}, {result['sentences']} sentences, {result['pairs']} pairs")
    print(f"  cos {f['cos']:.4f}  spearman {f['spearman']:.4f}  top1 {f['top1']:.3f} "
          f"(reference {f['top1_reference']:.3f})  pairwise {f['pairwise']:.4f} "
          f"(reference {f['pairwise_reference']:.4f})")


def run_eval(args):
    # checks that cost nothing come before loading torch and any model
    for path, what in ((args.compressed, "COMPRESSED"), (args.reference, "--reference"),
                       (args.text, "--text")):
        if path is not None and not os.path.exists(path):
            raise UserError(f"{path}: no such file or directory ({what})")
    if args.kind == "encoder" and args.reference is None:
        raise UserError("an encoder is evaluated against its original: pass "
                        "--reference ORIGINAL_DIR")
    if args.json:
        parent = os.path.dirname(os.path.abspath(args.json))
        if not os.path.isdir(parent):
            raise UserError(f"{args.json}: directory {parent} does not exist (--json)")
    from bitrank import eval as bitrank_eval
    from bitrank import text as bitrank_text
    import transformers
    transformers.utils.logging.disable_progress_bar()  # errors stay one line
    text = bitrank_text.load_text(args.text) if args.text else None
    result = bitrank_eval.evaluate(args.compressed, reference=args.reference, kind=args.kind,
                                   text=text, device=args.device, seq_len=args.seq_len,
                                   max_tokens=args.max_tokens, stride=args.stride,
                                   sentences=args.sentences)
    result.update(model=args.compressed, reference_path=args.reference, text_file=args.text)
    _print_eval(result, args)
    if args.json:
        try:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
        except OSError as e:
            raise UserError(f"{args.json}: cannot write: {e.strerror or e}") from None
    return 0


# ------------------------------------------------------------------ registry

def _take_everything(p):
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def _optional(command, module_name):
    """(add_arguments, run) of the module `module_name` (it defines both), or, when it
    is absent or fails to import, a stand-in whose run says the command is not
    available (the other subcommands keep working)."""
    try:
        module = importlib.import_module(module_name)
        return module.add_arguments, module.run
    except ModuleNotFoundError as e:
        reason = (f"{module_name} is not installed" if e.name == module_name
                  else f"{module_name} needs {e.name}, which is missing")
    except Exception as e:  # a broken optional module must not break `eval`
        reason = f"{module_name} failed to import: {type(e).__name__}: {e}"

    def unavailable(_args):
        raise UserError(f"not available ({reason})")
    return _take_everything, unavailable


def subcommands():
    """{name: (add_arguments(parser), run(args) -> exit status)}."""
    return {
        "eval": (add_eval_arguments, run_eval),
        # ---- registered here by their own modules (each defines add_arguments and run):
        "compress": _optional("compress", "bitrank.cli_compress"),
        "distill": _optional("distill", "bitrank.cli_distill"),
        "generate": _optional("generate", "bitrank.cli_generate"),
        "demo": _optional("demo", "bitrank.demo"),
        # ---- end of the optional subcommands
    }


HELP = {"eval": "quality of a compressed model on held-out text",
        "compress": "compress a model block by block through its own forward",
        "distill": "train a compressed model end to end against the original",
        "generate": "greedy text generation with a compressed causal LM: speed and memory",
        "demo": "compress a small model and show what it kept"}


def main(argv=None):
    """Runs the command line argv (default sys.argv[1:]); returns the exit status."""
    table = subcommands()
    parser = _Parser(prog="python -m bitrank",
                     description="bitrank: binary low-rank compression of transformers models")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (add_arguments, run) in table.items():
        p = sub.add_parser(name, help=HELP.get(name), prog=f"python -m bitrank {name}")
        add_arguments(p)
        p.set_defaults(_run=run)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 1
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except Exception as e:
        if not _is_user_error(e):
            raise
        message = " ".join(str(e).split()) or type(e).__name__
        sys.stderr.write(f"bitrank {args.command}: error: {message}\n")
        return 1


def _is_user_error(e):
    """Whether e is a mistake reported in one line (the package's own user errors and
    file-system errors); anything else is a bug and keeps its traceback."""
    kinds = [UserError, OSError]
    for module_name, cls in (("bitrank.eval", "EvalError"), ("bitrank.text", "TextError")):
        module = sys.modules.get(module_name)
        if module is not None:
            kinds.append(getattr(module, cls))
    kinds += [k for k in (getattr(sys.modules.get(m), "UserError", None)
                          for m in ("bitrank.cli_compress", "bitrank.cli_distill", "bitrank.cli_generate",
                                    "bitrank.demo")) if k]
    return isinstance(e, tuple(kinds))


if __name__ == "__main__":
    sys.exit(main())
