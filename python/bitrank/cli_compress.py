"""`python -m bitrank compress MODEL -o OUT`: a transformers model compressed block by
block through its own forward pass (bitrank.compress_model), saved with
bitrank.save_pretrained (loads with bitrank.load, evaluates with `python -m bitrank
eval OUT --reference MODEL`).

Under `torchrun --nproc-per-node N python -m bitrank compress ...` the N processes
share the work (bitrank.distributed; compress_model says how) and rank 0 alone
prints the report and writes OUT, whole or not at all (a directory beside it,
renamed into place).
"""
import json
import os
import shutil
import sys
import tempfile


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
    p.add_argument("--split-joint", action="store_true",
                   help="under torchrun: also split each joint-training step's batch over "
                        "the processes (the result then equals one process's within rounding, "
                        "not bit for bit)")
    p.add_argument("--report", default=None, help="write the report as JSON here")


def check_paths(args):
    """The output directory is new or empty, the calibration file exists."""
    if os.path.exists(args.out) and os.listdir(args.out):
        raise UserError(f"{args.out} exists and is not empty")
    if args.calib is not None and not os.path.isfile(args.calib):
        raise UserError(f"{args.calib}: no such file")


def resolve_device(name):
    """The device this process works on: under torchrun (WORLD_SIZE > 1) the process
    group is started here and a CUDA process takes cuda:LOCAL_RANK
    (bitrank.distributed.init_from_env); "auto" is CUDA where torch sees a GPU."""
    from bitrank import distributed
    try:
        return distributed.init_from_env(name)
    except distributed.DistributedError as e:
        raise UserError(str(e)) from None


def write_output(out, write, report=None, report_path=None):
    """write(dir) fills a new directory beside `out` that then becomes `out` (an empty
    `out` is replaced): a run that fails leaves no half-written output. Under torchrun
    rank 0 writes; the others wait for it."""
    from bitrank import distributed
    if distributed.is_main():
        parent = os.path.dirname(os.path.abspath(out))
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(out))}-",
                               dir=parent)
        try:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o777 & ~umask)
            write(tmp)
            os.replace(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if report_path:
            with open(report_path + ".tmp", "w") as f:
                json.dump(report, f, indent=1)
            os.replace(report_path + ".tmp", report_path)
    distributed.barrier()


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
    from bitrank import distributed
    if args.split_joint and args.batch_size < distributed.size():
        raise UserError(f"--split-joint cuts each batch over {distributed.size()} processes: "
                        f"--batch-size {args.batch_size} is fewer")
    model, tok = load_original(args.model, torch.float32)
    calibration = calibration_text(args)
    report = bitrank.compress_model(model, calibration, tokenizer=tok, bpw=args.bpw,
                                    paths=args.paths, n_samples=args.samples,
                                    seq_len=args.seq_len, pack=not args.per_text, device=device,
                                    steps=args.steps,
                                    layer_steps=args.layer_steps, target=args.target,
                                    batch_size=args.batch_size, exclude=args.exclude,
                                    split_joint=args.split_joint)
    if distributed.is_main():
        print(report.table())
    write_output(args.out, lambda d: bitrank.save_pretrained(model, d, tokenizer=tok),
                 report.to_dict(), args.report)
    if distributed.is_main():
        print(f"saved to {args.out}", file=sys.stderr)
    distributed.shutdown()
    return 0
