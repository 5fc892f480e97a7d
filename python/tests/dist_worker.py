"""The process test_distributed.py starts, alone or under torchrun:

    python dist_worker.py compress OUT_DIR SEED [KIND TARGET SPLIT_JOINT]
    python dist_worker.py distill OUT_DIR SEED TEACHER_DIR STUDENT_DIR STEPS
    python dist_worker.py teacher_shard OUT_DIR SEED TEACHER_DIR STUDENT_DIR STEPS

Each process writes what it ends with to OUT_DIR/rank<R>.pt (the test compares the
ranks with each other and with one process); bitrank writes nothing itself here."""
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bitrank  # noqa: E402  (before torch: bitrank/__init__.py)
import torch  # noqa: E402
import transformers  # noqa: E402

from bitrank import distributed  # noqa: E402


def tiny(kind):
    if kind == "bert":
        cfg = transformers.BertConfig(vocab_size=120, hidden_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, intermediate_size=128,
                                      max_position_embeddings=64)
        return transformers.BertModel(cfg).eval()
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=128, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg).eval()


def calibration(seed, kind):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 100, (20, 24), generator=g)
    if kind != "bert":
        return ids
    # sentences of their own lengths, padded: rows that differ in valid tokens
    lengths = torch.randint(6, 25, (20,), generator=g)
    mask = (torch.arange(24)[None, :] < lengths[:, None]).long()
    return {"input_ids": ids, "attention_mask": mask}


def save(out_dir, obj):
    path = os.path.join(out_dir, f"rank{distributed.rank()}.pt")
    torch.save(obj, path + ".tmp")
    os.replace(path + ".tmp", path)


def job_compress(out_dir, seed, kind="llama", target="block", split_joint="0"):
    torch.manual_seed(seed)
    model = tiny(kind)
    # 5 batches of 4 (3 processes own 2, 2 and 1 of them); 4 train batches give
    # 384 tokens (fewer with padding), so max_layer_tokens=200 makes each linear
    # draw its subset from the job's generator
    report = bitrank.compress_model(model, calibration(seed, kind), bpw=2.0, paths=2,
                                    steps=12, layer_steps=8, batch_size=4, heldout=0.2,
                                    max_layer_tokens=200, eval_every=4, device="cpu",
                                    progress=True, seed=seed, target=target,
                                    split_joint=split_joint == "1")
    rep = report.to_dict()
    for r in rep["layers"] + rep["blocks"]:
        r.pop("seconds")
    rep.pop("seconds")
    # float32 sums whose value depends on their order: 1e8 + 1 rounds back to 1e8, so
    # the ranks' (1e8, 1, -1e8, 1, ...) add up to rank order's result only
    t = torch.tensor([[1e8, 1.0, -1e8][distributed.rank() % 3]] * 3, dtype=torch.float32)
    distributed.all_reduce_fixed([t])
    save(out_dir, {"state": model.state_dict(), "report": rep, "world": distributed.size(),
                   "fixed_sum": t.tolist()})


def job_distill(out_dir, seed, teacher_dir, student_dir, steps):
    teacher = transformers.LlamaForCausalLM.from_pretrained(teacher_dir).eval()
    student = bitrank.load(student_dir)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 90, (24, 20), generator=g)
    report = bitrank.distill(student, teacher, ids, steps=int(steps), batch_size=4,
                             eval_every=3, log_every=1, keep="last", device="cpu",
                             progress=True, seed=seed, heldout=0.125,
                             checkpoint_dir=os.path.join(out_dir, "ckpt"), checkpoint_every=3)
    save(out_dir, {"state": student.state_dict(), "curve": report.curve,
                   "eval_curve": report.eval_curve, "tokens": report.tokens,
                   "world": distributed.size()})


def job_teacher_shard(out_dir, seed, teacher_dir, student_dir, steps):
    """The same run twice in these processes, the teacher replicated and then sharded
    (each from its own fresh copies of the models), with the sharded teacher's
    parameter bytes on this process: at rest (read as the student's first block
    starts, the teacher's forward done) and at their peak (inside each teacher
    block's forward, its parameters gathered); then the mistakes with it."""
    from bitrank.distill import resident_parameter_bytes
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 90, (24, 20), generator=g)
    kw = dict(steps=int(steps), batch_size=4, eval_every=3, log_every=1, keep="last",
              device="cpu", progress=False, seed=seed, heldout=0.125)
    res = {}
    for shard in (False, True):
        teacher = transformers.LlamaForCausalLM.from_pretrained(teacher_dir).eval()
        student = bitrank.load(student_dir)
        rest, peak = [], []
        if shard:
            whole_units = {"blocks": [sum(p.numel() * p.element_size()
                                          for p in b.parameters())
                                      for b in bitrank.find_blocks(teacher)[1]],
                           "head": teacher.lm_head.weight.numel()
                           * teacher.lm_head.weight.element_size()}
            student.model.layers[0].register_forward_pre_hook(
                lambda *a: rest.append(resident_parameter_bytes(teacher)[0]))
            for b in teacher.model.layers:
                b.mlp.register_forward_hook(
                    lambda *a: peak.append(resident_parameter_bytes(teacher)[0]))
        report = bitrank.distill(student, teacher, ids, teacher_shard=shard, **kw)
        res["sharded" if shard else "replicated"] = {
            "state": student.state_dict(), "curve": report.curve,
            "eval_curve": report.eval_curve, "options": report.options}
    res["rest"], res["peak"] = rest, peak
    res["after"], res["whole"] = resident_parameter_bytes(teacher)
    res["units"] = whole_units
    res["param_types"] = sorted({type(p).__name__ for p in teacher.parameters()})
    try:  # the sharded teacher asked to run whole
        bitrank.distill(bitrank.load(student_dir), teacher, ids, teacher_shard=False, **kw)
        res["refused"] = None
    except ValueError as e:
        res["refused"] = str(e)
    # and again sharded: its FSDP units are reused, not made twice
    again = bitrank.distill(bitrank.load(student_dir), teacher, ids, teacher_shard=True,
                            **dict(kw, steps=1))
    res["again"] = again.curve
    res["after_again"] = resident_parameter_bytes(teacher)[0]
    res["world"] = distributed.size()  # distill started the process group
    save(out_dir, res)


if __name__ == "__main__":
    job, out, seed, *rest = sys.argv[1:]
    {"compress": job_compress, "distill": job_distill,
     "teacher_shard": job_teacher_shard}[job](out, int(seed), *rest)
    distributed.shutdown()
