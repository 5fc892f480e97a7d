"""`python -m bitrank distill COMPRESSED --teacher MODEL -o OUT`: a compressed model
(from `python -m bitrank compress` or bitrank.save_pretrained) trained end to end
against the original (bitrank.distill), saved with bitrank.save_pretrained.

Under `torchrun --nproc-per-node N python -m bitrank distill ...` the N processes
train data parallel (bitrank.distill says how); rank 0 alone prints, writes the
checkpoints and OUT (whole or not at all, as `compress` writes it). --teacher-shard
shards the teacher's parameters over the processes instead of holding it whole on
each (distill's teacher_shard)."""
import os
import sys


class UserError(Exception):
    """A mistake reported in one line."""


def add_arguments(p):
    p.add_argument("student", help="the compressed model's directory")
    p.add_argument("--teacher", required=True, help="the original transformers model directory")
    p.add_argument("-o", "--out", required=True, help="output directory")
    p.add_argument("--calib", default=None,
                   help="training text file (default: the fortunes calibration text)")
    p.add_argument("--samples", type=int, default=256, help="training sequences (256)")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per sequence (128)")
    p.add_argument("--per-text", action="store_true",
                   help="each paragraph of the --calib text (of the default text, each "
                        "sentence) its own sequence, padded to --seq-len (a sentence "
                        "encoder's calibration), not one stream cut into windows")
    p.add_argument("--steps", type=int, default=1000, help="optimizer steps (1000)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per step (1)")
    p.add_argument("--lr", type=float, default=5e-3, help="scales' step, relative (5e-3)")
    p.add_argument("--sign-lr", type=float, default=5e-3, help="sign latents' step (5e-3)")
    p.add_argument("--engine", choices=("torch", "library"), default="torch")
    p.add_argument("--sign-mode", choices=("latent", "exact"), default="latent",
                   help="latent signs, or the library's exact-flip optimizer (--engine "
                        "library)")
    p.add_argument("--flip-budget", type=float, default=1e-3,
                   help="exact: most flips per step, a fraction of a sign matrix (1e-3)")
    p.add_argument("--curvature", type=float, default=1.0,
                   help="exact: the loss's second derivative in a layer's output (1)")
    p.add_argument("--kl-weight", type=float, default=1.0)
    p.add_argument("--hidden-weight", type=float, default=1.0)
    p.add_argument("--embed-weight", type=float, default=1.0)
    p.add_argument("--no-train-other", action="store_true",
                   help="freeze norms and biases (only the compressed layers train)")
    p.add_argument("--checkpoint-dir", default=None,
                   help="write checkpoints here, and resume from one written there")
    p.add_argument("--teacher-shard", action="store_true",
                   help="under torchrun: the teacher's parameters sharded over the processes "
                        "(FSDP2; each holds about 1/N of them, the forward gathers a block "
                        "at a time) rather than whole on each; the same results")
    p.add_argument("--device", default="auto")
    p.add_argument("--report", default=None, help="write the report as JSON here")


def run(args):
    import torch
    import bitrank
    from bitrank import distributed
    from bitrank.cli_compress import calibration_text, check_paths, load_original, \
        resolve_device, write_output
    from bitrank.distill import distill
    if args.sign_mode == "exact" and args.engine != "library":
        raise UserError("--sign-mode exact is the library's sign optimizer: add --engine library")
    if args.sign_mode == "exact" and not (args.flip_budget > 0 and args.curvature > 0):
        raise UserError("--sign-mode exact needs --flip-budget and --curvature above 0")
    for path, what in ((args.student, "the compressed model"), (args.teacher, "the teacher")):
        if not os.path.exists(path):
            raise UserError(f"{path}: no such file or directory ({what})")
    check_paths(args)
    device = resolve_device(args.device)
    if distributed.size() > 1 and args.engine != "torch":
        raise UserError(f"--engine {args.engine} keeps its gradients in the library: on "
                        f"{distributed.size()} processes use --engine torch")
    if args.batch_size < distributed.size():
        raise UserError(f"--batch-size {args.batch_size} is split over {distributed.size()} "
                        f"processes: it must be at least that")
    # the teacher runs without gradients: half precision on a GPU
    teacher, tok = load_original(args.teacher, torch.float16 if device.startswith("cuda")
                                 else torch.float32)
    try:
        student = bitrank.load(args.student, device=device)
    except (ValueError, FileNotFoundError) as e:
        raise UserError(f"{args.student}: {e}")
    data = calibration_text(args)
    report = distill(student, teacher, data, tokenizer=tok, steps=args.steps,
                     batch_size=args.batch_size, grad_accum=args.grad_accum, lr=args.lr,
                     sign_lr=args.sign_lr, n_samples=args.samples, seq_len=args.seq_len,
                     pack=not args.per_text,
                     kl_weight=args.kl_weight, hidden_weight=args.hidden_weight,
                     embed_weight=args.embed_weight, engine=args.engine,
                     sign_mode=args.sign_mode, flip_budget=args.flip_budget,
                     curvature=args.curvature,
                     train_other=not args.no_train_other, checkpoint_dir=args.checkpoint_dir,
                     device=device, teacher_shard=args.teacher_shard)
    if distributed.is_main():
        print(report.table())
    qc = dict(getattr(student.config, "quantization_config", None) or {})
    qc["distill"] = {"steps": report.steps, "tokens": report.tokens, "engine": report.engine}
    if distributed.size() > 1:
        qc["distill"]["processes"] = distributed.size()
    student.config.quantization_config = qc
    write_output(args.out, lambda d: bitrank.save_pretrained(student, d, tokenizer=tok),
                 report.to_dict(), args.report)
    if distributed.is_main():
        print(f"saved to {args.out}", file=sys.stderr)
    distributed.shutdown()
    return 0
