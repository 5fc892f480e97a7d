#!/usr/bin/env python3
"""Trains the project's own small causal LM on the King James Bible (data/tiny-lm/).

A model to measure compression on whose training data, tokenizer and held-out text
are all known and remade from Debian packages (bitrank.kjv): no model hub involved.

  corpus     the KJV's 1189 chapters (bitrank.kjv.kjv_chapters), split by
             bitrank.kjv.kjv_split: every 20th chapter (index 0, 20, ...) is held out
  tokenizer  byte-level BPE (HF tokenizers) trained on the train chapters only,
             vocabulary 4096 with the special tokens <s> (0, bos), </s> (1, eos) and
             <pad> (2); encoding a text prepends <s>
  stream     each chapter as <s> text </s>, chapters in order (bitrank.eval's
             token_stream, so training and evaluation join text the same way)
  model      transformers LlamaForCausalLM, hidden 256, 6 layers, 4 heads of 64 (4 kv
             heads), SwiGLU 768, tied embeddings, 512 positions, default RoPE: 6.16 M
             parameters
  training   windows of --seq-len tokens at uniform random offsets of the train stream,
             loss on every token but each window's first; AdamW (betas 0.9/0.95, weight
             decay on the matrices, the embedding among them, not on the norms), linear
             warmup then cosine decay to --min-lr-ratio of the peak, gradient clipping
             at 1, bf16 autocast on CUDA (fp32 weights), seed --seed
  validation every VALID_EVERY-th train chapter (train list positions 9, 28, ...)
             is not trained on; its perplexity every --eval-every steps chooses the
             kept weights (the best step: 950k tokens overfit a 6 M model within a few
             epochs, and the test chapters must not choose)
  held out   bitrank.eval.perplexity on the test chapters in windows of --seq-len, in fp32,
             of the kept weights and of the stored fp16 ones
  output     --out (default data/tiny-lm/): model.safetensors (fp16), config.json,
             generation_config.json, tokenizer.json + tokenizer_config.json
             (AutoTokenizer / AutoModelForCausalLM.from_pretrained(out) load them) and
             train_log.json

--max-seconds bounds the training loop's time (tokenizer training, evaluation and
saving not counted): the learning-rate schedule then follows whichever of step/steps
and elapsed/max_seconds is further along, so a cut run still ends its cosine decay.

Run from anywhere (scripts/train-tiny-lm is the wrapper):

    python3 bench/tiny_lm/train.py [--steps 600] [--max-seconds S] [--device cuda]
        [--out data/tiny-lm] [--corpus-text FILE]

The corpus is the `bible` program's (apt-get install bible-kjv bible-kjv-text), or the
text copy $BITRANK_KJV_TEXT (python -m bitrank.kjv FILE makes it), or --corpus-text:
any file in that copy's format, not checked for 1189 chapters (tests use a small one).
"""
import argparse
import json
import math
import os
import platform
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bitrank import kjv  # noqa: E402
from bitrank.eval import perplexity, token_stream  # noqa: E402

SPECIAL_TOKENS = ["<s>", "</s>", "<pad>"]  # ids 0, 1, 2 in this order
MAX_STORED_BYTES = 14_000_000
VALID_EVERY = 19  # train chapters held out for choosing the kept step
OFFSET_BLOCK = 256  # steps whose window offsets are drawn together (fixed: the batches
                    # of a seed must not depend on --steps)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.path.join(REPO, "data", "tiny-lm"),
                   help="output directory (default: data/tiny-lm of the repository)")
    p.add_argument("--corpus-text", metavar="FILE",
                   help="chapters from this text file (bitrank.kjv's format) instead of the KJV")
    # 600 steps of 64 x 256 tokens: about 11 passes over the 0.91M training tokens (more
    # overfits: the validation perplexity turns up after about 550)
    p.add_argument("--steps", type=int, default=600, help="optimizer steps (default 600)")
    p.add_argument("--max-seconds", type=float,
                   help="stop the training loop after this long; the schedule ends with it")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--min-lr-ratio", type=float, default=0.1,
                   help="the learning rate at the schedule's end, over the peak")
    p.add_argument("--warmup", type=int, default=100, help="linear warmup steps")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the training forward (CUDA; compile time is counted)")
    p.add_argument("--log-every", type=int, default=50, help="train-loss line every N steps")
    p.add_argument("--eval-every", type=int, default=50,
                   help="validation perplexity every N steps (0: at the end only)")
    p.add_argument("--eval-batch-size", type=int, default=32)
    args = p.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1 or args.seq_len < 2 or args.warmup < 0:
        p.error("--steps and --batch-size must be positive, --seq-len at least 2, "
                "--warmup not negative")
    return args


def load_corpus(args):
    """(chapters, description of the source)."""
    if args.corpus_text:
        return kjv.read_kjv_text(args.corpus_text), f"text file {args.corpus_text}"
    if os.environ.get("BITRANK_KJV_TEXT"):
        path = os.environ["BITRANK_KJV_TEXT"]
        return kjv.kjv_chapters(), f"KJV text copy {path} ($BITRANK_KJV_TEXT)"
    program = kjv.find_bible()
    return kjv.kjv_chapters(), (f"KJV from {program} (data "
                                f"{kjv.find_datadir(program)}/bible.data)")


def train_tokenizer(texts, vocab_size, model_max_length):
    """Byte-level BPE on `texts`, wrapped for transformers. Deterministic: the trainer
    counts words and breaks ties between equally frequent pairs by their ids, all fixed
    by the texts."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # no prefix space: a chapter starts at its first word, as in the stream
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    # <s> before every encoded text, like Llama's tokenizers: the model always sees
    # a chapter start after it; eos is appended by the stream, not the tokenizer
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", model_max_length=model_max_length)


def save_tokenizer(tokenizer, out):
    tokenizer.save_pretrained(out)
    # transformers 5 names its own class here (TokenizersBackend), which transformers 4
    # cannot load; PreTrainedTokenizerFast loads in both and is the same class in 5
    path = os.path.join(out, "tokenizer_config.json")
    with open(path) as f:
        config = json.load(f)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config.pop("backend", None)
    with open(path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


def make_model(vocab_size, tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=256, num_hidden_layers=6,
        num_attention_heads=4, num_key_value_heads=4, head_dim=64, intermediate_size=768,
        max_position_embeddings=512, tie_word_embeddings=True, rms_norm_eps=1e-5,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id)
    return LlamaForCausalLM(config)


def lr_factor(step, progress, warmup, min_ratio):
    """Linear warmup over `warmup` steps times a cosine from 1 to min_ratio over the
    run's progress in [0, 1]."""
    warm = min(1.0, (step + 1) / warmup) if warmup else 1.0
    cosine = min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
    return warm * cosine


def evaluate(model, test_ids, args, device):
    r = perplexity(model, None, test_ids, seq_len=args.seq_len, batch=args.eval_batch_size,
                   device=device)
    return {"ppl": r["ppl"], "nll": r["nll"], "tokens": r["tokens"]}


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path)
               if os.path.isfile(os.path.join(path, n)))


def main(argv=None):
    args = parse_args(argv)
    import tokenizers
    import transformers

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    t_start = time.perf_counter()

    chapters, source = load_corpus(args)
    train_texts, test_texts = kjv.kjv_split(chapters)
    if not train_texts or not test_texts:
        raise SystemExit(f"{source}: {len(chapters)} chapters, too few for a train/test split")
    print(f"corpus: {source}: {len(chapters)} chapters, {len(train_texts)} train, "
          f"{len(test_texts)} held out", flush=True)

    tokenizer = train_tokenizer(train_texts, args.vocab_size, model_max_length=512)
    if len(tokenizer) > args.vocab_size:
        raise SystemExit(f"tokenizer has {len(tokenizer)} tokens, over --vocab-size")
    valid_texts = train_texts[9::VALID_EVERY]
    fit_texts = [t for i, t in enumerate(train_texts) if i % VALID_EVERY != 9]
    train_ids = torch.tensor(token_stream(fit_texts, tokenizer), dtype=torch.long)
    valid_ids = torch.tensor(token_stream(valid_texts, tokenizer), dtype=torch.long)
    test_ids = torch.tensor(token_stream(test_texts, tokenizer), dtype=torch.long)
    if train_ids.numel() < args.seq_len:
        raise SystemExit(f"train stream of {train_ids.numel()} tokens is shorter than "
                         f"--seq-len {args.seq_len}")
    print(f"tokenizer: {len(tokenizer)} tokens; train stream {train_ids.numel()} tokens, "
          f"validation {valid_ids.numel()}, held-out {test_ids.numel()}", flush=True)

    torch.manual_seed(args.seed)
    model = make_model(args.vocab_size, tokenizer).to(device)
    n_params = sum(p.numel() for p in model.parameters())  # the tied embedding once
    print(f"model: LlamaForCausalLM, {n_params} parameters, on {device}", flush=True)

    # weight decay on the matrices (the tied embedding among them), not on the norms
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), fused=device.type == "cuda")
    forward = torch.compile(model) if args.compile else model
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    # the windows' offsets come from their own generator: the same batches for a seed
    # whatever the model's initialization drew. They are drawn on the CPU (the same
    # on every device) for OFFSET_BLOCK steps at a time and copied over in one go: a
    # copy each step would make the host wait for the GPU every step
    gen = torch.Generator().manual_seed(args.seed)
    block_starts = None
    offsets = torch.arange(args.seq_len, device=device)
    high = train_ids.numel() - args.seq_len + 1
    train_on_device = train_ids.to(device)

    losses, evals = [], []
    best = None  # (validation nll, step, state) of the best evaluated step
    loss_sum = torch.zeros((), device=device)
    loss_n = 0
    eval_seconds = 0.0
    t_train = time.perf_counter()
    t_log, step_log = t_train, 0
    step = 0
    stop_reason = "steps"

    def log_train(step, lr):
        nonlocal t_log, step_log, loss_n
        mean = loss_sum.item() / loss_n  # .item() waits for the GPU: rates are real
        now = time.perf_counter()
        rate = (step - step_log) / max(now - t_log, 1e-9)
        losses.append({"step": step, "loss": mean, "lr": lr,
                       "elapsed_s": now - t_train - eval_seconds})
        print(f"step {step:5d}  loss {mean:.4f}  lr {lr:.2e}  {rate:.2f} steps/s  "
              f"{rate * args.batch_size * args.seq_len / 1e3:.0f} k tok/s", flush=True)
        loss_sum.zero_()
        loss_n = 0
        t_log, step_log = now, step

    model.train()
    while step < args.steps:
        elapsed = time.perf_counter() - t_train - eval_seconds  # evaluations not counted
        if args.max_seconds is not None and elapsed >= args.max_seconds:
            stop_reason = "max_seconds"
            break
        progress = step / args.steps
        if args.max_seconds is not None:
            progress = max(progress, elapsed / args.max_seconds)
        lr = args.lr * lr_factor(step, progress, args.warmup, args.min_lr_ratio)
        for group in opt.param_groups:
            group["lr"] = lr

        if step % OFFSET_BLOCK == 0:
            block_starts = torch.randint(0, high, (OFFSET_BLOCK, args.batch_size),
                                         generator=gen).to(device)
        x = train_on_device[block_starts[step % OFFSET_BLOCK][:, None] + offsets]
        with autocast:
            logits = forward(input_ids=x, use_cache=False).logits
        loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]),
                               x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        step += 1
        loss_sum += loss.detach()
        loss_n += 1

        if step % args.log_every == 0 or step == args.steps:
            log_train(step, lr)
        if args.eval_every and (step % args.eval_every == 0 or step == args.steps):
            t_eval = time.perf_counter()
            r = evaluate(model, valid_ids, args, device)
            model.train()
            evals.append({"step": step, **r})
            if best is None or r["nll"] < best[0]:
                best = (r["nll"], step, {k: v.detach().clone()
                                         for k, v in model.state_dict().items()})
            print(f"step {step:5d}  validation ppl {r['ppl']:.3f} (nll {r['nll']:.4f})",
                  flush=True)
            eval_seconds += time.perf_counter() - t_eval
            t_log += time.perf_counter() - t_eval  # the rate counts training alone
    if loss_n:  # the steps since the last line, when --max-seconds ended the loop
        log_train(step, lr)
    if device.type == "cuda":
        torch.cuda.synchronize()
    train_seconds = time.perf_counter() - t_train - eval_seconds
    steps_per_s = step / max(train_seconds, 1e-9)
    print(f"trained {step} steps in {train_seconds:.1f} s ({steps_per_s:.2f} steps/s, "
          f"stopped by {stop_reason})", flush=True)

    if not evals or evals[-1]["step"] != step:  # the loop ended off an evaluation step
        r = evaluate(model, valid_ids, args, device)
        evals.append({"step": step, **r})
        if best is None or r["nll"] < best[0]:
            best = (r["nll"], step, None)  # None: the weights as they are
    kept_step = best[1]
    if best[2] is not None:
        model.load_state_dict(best[2])
    print(f"kept step {kept_step} (validation ppl {math.exp(best[0]):.3f})", flush=True)
    final = evaluate(model, test_ids, args, device)
    # the stored weights are fp16: their perplexity is the baseline compression is
    # compared with (computed in fp32 on the fp16-rounded values)
    model.half().float()
    stored = evaluate(model, test_ids, args, device)
    print(f"held-out ppl {final['ppl']:.4f} (fp32 weights), {stored['ppl']:.4f} (stored "
          f"fp16 weights), {stored['tokens']} tokens", flush=True)

    os.makedirs(args.out, exist_ok=True)
    model.half()
    model.config.dtype = torch.float16
    from transformers import GenerationConfig
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(args.out)
    save_tokenizer(tokenizer, args.out)

    log = {
        "corpus": {"source": source, "sha256": kjv.corpus_sha256(chapters),
                   "chapters": len(chapters), "train_chapters": len(train_texts),
                   "test_chapters": len(test_texts),
                   "split": f"chapter i held out when i % {kjv.TEST_EVERY} == 0",
                   "validation": f"train chapter j not trained on when j % {VALID_EVERY} "
                                 "== 9", "validation_chapters": len(valid_texts),
                   "train_tokens": train_ids.numel(), "validation_tokens": valid_ids.numel(),
                   "test_tokens": test_ids.numel()},
        "tokenizer": {"type": "byte-level BPE", "vocab_size": len(tokenizer),
                      "special_tokens": SPECIAL_TOKENS},
        "model": {"class": "LlamaForCausalLM", "parameters": n_params},
        "args": {k: v for k, v in vars(args).items() if k != "out"},
        "steps": step, "stopped_by": stop_reason, "seed": args.seed,
        "kept_step": kept_step,
        "losses": losses,
        "validation": evals,
        "heldout_ppl": final["ppl"],
        "heldout_ppl_stored_fp16": stored["ppl"],
        "heldout_tokens": stored["tokens"],
        "train_seconds": train_seconds,
        "steps_per_second": steps_per_s,
        "eval_seconds": eval_seconds,
        "wall_seconds": time.perf_counter() - t_start,
        "device": (torch.cuda.get_device_name(device) if device.type == "cuda"
                   else f"cpu ({platform.processor() or platform.machine()}, "
                        f"{torch.get_num_threads()} threads)"),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__, "python": platform.python_version()},
    }
    with open(os.path.join(args.out, "train_log.json"), "w") as f:
        json.dump(log, f, indent=1)
        f.write("\n")
    size = dir_bytes(args.out)
    print(f"saved {args.out}: {', '.join(sorted(os.listdir(args.out)))}; {size} bytes",
          flush=True)
    if size > MAX_STORED_BYTES:
        print(f"warning: {size} bytes stored, over the {MAX_STORED_BYTES} meant for the "
              "repository", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
