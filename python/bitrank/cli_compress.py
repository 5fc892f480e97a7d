"""`python -m bitrank compress MODEL -o OUT`: a transformers model compressed block by
block through its own forward pass (bitrank.compress_model), saved with
bitrank.save_pretrained (loads with bitrank.load, evaluates with `python -m bitrank
eval OUT --reference MODEL`)."""
import json
import os
import sys


class UserError(Exception):
    """A mistake reported in one line."""


def add_arguments(p):
    p.add_argument("model", help="a transformers model directory (or a Hub id, with network)")
    p.add_argument("-o", "--out", required=True, help="output directory")
    p.add_argument("--calib", default=None,
                   help="calibration text file (default: the fortunes calibration text)")
    p.add_argument("--samples", type=int, default=128, help="calibration sequences (128)")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per sequence (128)")
    p.add_argument("--per-text", action="store_true",
                   help="each paragraph of the --calib text (of the default text, each "
                        "sentence) its own sequence, padded to --seq-len (a sentence "
                        "encoder's calibration), not one stream cut into windows")
    p.add_argument("--bpw", type=float, default=1.0, help="bits per weight per layer (1.0)")
    p.add_argument("--paths", type=int, default=2, choices=(1, 2))
    p.add_argument("--steps", type=int, default=400, help="joint training steps per block")
    p.add_argument("--layer-steps", type=int, default=None,
                   help="the library's per-layer steps (its default; 0: initialization only)")
    p.add_argument("--target", choices=("block", "model"), default="block")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--device", default="auto")
    p.add_argument("--exclude", action="append", default=[],
                   help="glob of linears (names inside a block) to keep as they are")
    p.add_argument("--report", default=None, help="write the report as JSON here")


def check_paths(args):
    """The output directory is new or empty, the calibration file exists."""
    if os.path.exists(args.out) and os.listdir(args.out):
        raise UserError(f"{args.out} exists and is not empty")
    if args.calib is not None and not os.path.isfile(args.calib):
        raise UserError(f"{args.calib}: no such file")


def resolve_device(name):
    import torch
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def load_original(path, dtype):
    """(model, tokenizer) of a transformers model directory, the model of the class its
    config names (AutoModel when it names none transformers has)."""
    import transformers
    try:
        config = transformers.AutoConfig.from_pretrained(path)
    except OSError as e:
        raise UserError(f"{path}: not a transformers model ({str(e).splitlines()[0]})")
    archs = getattr(config, "architectures", None) or []
    cls = next((getattr(transformers, a) for a in archs if hasattr(transformers, a)),
               transformers.AutoModel)
    model = cls.from_pretrained(path, dtype=dtype).eval()
    return model, transformers.AutoTokenizer.from_pretrained(path)


def calibration_text(args):
    """The --calib file's paragraphs, or the fortunes calibration entries (with
    --per-text their sentences: bitrank.text.calibration_sentences)."""
    from bitrank import text
    if args.calib:
        return text.paragraphs(text.load_text(args.calib))
    if getattr(args, "per_text", False):
        return text.calibration_sentences(seed=0)[1]
    return text.calibration_entries(seed=0)[1]


def run(args):
    import torch
    import bitrank
    check_paths(args)
    device = resolve_device(args.device)
    model, tok = load_original(args.model, torch.float32)
    calibration = calibration_text(args)
    report = bitrank.compress_model(model, calibration, tokenizer=tok, bpw=args.bpw,
                                    paths=args.paths, n_samples=args.samples,
                                    seq_len=args.seq_len, pack=not args.per_text, device=device,
                                    steps=args.steps,
                                    layer_steps=args.layer_steps, target=args.target,
                                    batch_size=args.batch_size, exclude=args.exclude)
    print(report.table())
    bitrank.save_pretrained(model, args.out, tokenizer=tok)
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report.to_dict(), f, indent=1)
    print(f"saved to {args.out}", file=sys.stderr)
    return 0
