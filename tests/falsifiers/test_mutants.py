"""The planted bugs of pvlab/falsifiers/mutants/: each one changes what the runtime does while it is
active (a mutant that changes nothing is a defect: it would make every falsifier look strong or
every falsifier look blind), and the runtime is exactly itself again afterwards — the same
module and class attributes, and bit-for-bit the same logits, losses, tokens and optimizer
steps of a tiny random model.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import distributed_probes  # probes of mutants/distributed.py
import oracle_mutant_probes  # probes of mutants/independent.py and mutants/oracles.py
from oracle_mutant_probes import tiny_model
import review_mutant_probes  # probes of mutants/independent_review.py
import third_mutant_probes  # probes of the third blind batch (docs/independent-mutants.md)
import fourth_mutant_probes  # probes of the fourth blind batch (docs/mutants.md, "Fourth blind batch")
import fifth_mutant_probes  # probes of the fifth blind batch (docs/mutants.md, "Fifth blind batch")
import sixth_mutant_probes  # probes of the sixth blind batch (docs/mutants.md, "Sixth blind batch")
import seventh_mutant_probes  # probes of the seventh blind batch (docs/mutants.md, "Seventh blind batch")
import eighth_mutant_probes  # probes of the eighth blind batch (docs/mutants.md, "Eighth blind batch")
import ninth_mutant_probes  # probes of the ninth blind batch (docs/mutants.md, "Ninth blind batch")
import tenth_mutant_probes  # probes of the tenth blind batch (docs/independent-mutants.md, "Tenth batch")
import twelfth_mutant_probes  # probes of the twelfth blind batch (docs/independent-mutants.md, "Twelfth batch")
import equivalence_probes  # probes of mutants/equivalence.py (kept apart: this file's size)
import performance_probes  # probes of mutants/performance.py
import domain_mutant_probes  # probes of mutants/domains.py and the sampler bugs of mutants/data.py
import entrypoint_mutant_probes  # probes of mutants/entrypoints.py
import adapter_mutant_probes  # probes of mutants/adapters.py (the pack's transformers adapter)
import behaviour_mutant_probes  # probes of mutants/behaviour.py (fast-path-on-cpu, documented-behaviour)
import route_mutant_probes  # probes of mutants/routes.py (fast-routes)
import master_weight_probes  # probes of the master-weight bugs of mutants/trainer.py (master-weights)
import row_mutant_probes  # probes of the independent-rows bugs (mutants/kernels.py, mutants/model.py)
import training_mutant_probes  # probes of the first batches' training, optimizer and checkpoint bugs
from training_mutant_probes import tokens
import pytest
import torch

from pv import mutation
from pv.config import load_workspace

from pvlab.falsifiers import fixtures, mutants as planted
from pvlab.falsifiers.mutants import planting
from pvlab.falsifiers.mutants.child import python_args, python_command
from pvlab.runtime import checkpoint, config as runtime_config, data, devices, kernels, parity, trainer, zoo
from pvlab.runtime.config import preset
from pvlab.runtime.data import LMBatch
from pvlab.runtime.model import KVCache

pytestmark = pytest.mark.slow  # builds and runs a tiny model once per mutant (about a minute in all)

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = planted.registry()
NAMES = sorted(REGISTRY)


# ---- a tiny model and the runtime's observable behaviour ------------------------------------------


def behaviour() -> dict[str, object]:
    """What the runtime does on the CPU, end to end, as exact tensors and token lists."""
    out: dict[str, object] = {}
    ids = tokens()
    batch = LMBatch.from_sequences(tokens(2, 13, seed=4))
    padded = LMBatch.from_sequences([tokens(1, 13, seed=5)[0].tolist(), tokens(1, 6, seed=6)[0].tolist()])
    for path in ("reference", "fast"):
        model = tiny_model(path=path)
        with torch.no_grad():
            out[f"{path}/logits"] = model(ids)
            out[f"{path}/loss"] = model.loss(batch.inputs, batch.targets)
            out[f"{path}/padded_loss"] = model.loss(padded.inputs, padded.targets)
            cache = KVCache(model.config.num_hidden_layers)
            out[f"{path}/cached"] = torch.cat([model(ids[:, :5], cache), model(ids[:, 5:7], cache),
                                               model(ids[:, 7:8], cache)], dim=1)
        from pvlab.runtime.generate import generate

        out[f"{path}/greedy"] = generate(model, ids[0, :4].tolist(), max_new_tokens=6).new_ids
    # a training step, an eval, and the optimizer's decay policy
    model = tiny_model()
    run = trainer.Trainer(model, lr=1e-2, weight_decay=0.1, seed=0)
    out["eval_before"] = run.eval_batch(batch)
    out["train_loss"] = run.train_batch(LMBatch.from_sequences(tokens(2, 13, seed=7)))
    out["eval_after"] = run.eval_batch(batch)
    out["grad_norm"] = run.last_grad_norm
    out["weights_after_step"] = torch.cat([p.detach().flatten() for p in model.parameters()])
    out["optimizer"] = type(run.optimizer).__name__
    # loading a state dict through populate, the parity gate, the init refusals, presets, split
    source = tiny_model(seed=8)
    state = {name: t.detach().clone() for name, t in checkpoint.model_tensors(source).items()}
    loaded = checkpoint.init_model(config=preset("tiny"), weights=state, device="cpu", parity_gate=True)
    out["populated"] = torch.cat([p.detach().flatten() for p in loaded.parameters()])
    out["populate_complete"] = loaded.populate_report.complete
    out["gate_report"] = loaded.parity_report
    for kwargs in ({"config": "tiny"}, {"weights": "random"}):
        try:
            checkpoint.init_model(**kwargs)
            out[f"init{sorted(kwargs)}"] = "accepted"
        except Exception as error:  # noqa: BLE001 - the refusal itself is the behaviour
            out[f"init{sorted(kwargs)}"] = type(error).__name__
    out["presets"] = {name: runtime_config.preset(name) for name in runtime_config.PRESETS}
    documents = data.synthetic_python_corpus(30, seed=1)
    out["split"] = data.split_documents(documents, val_fraction=0.2, seed=1)
    out["resolved_no_gpu"] = devices.resolve_device(None, allow_gpu=False)
    return out


def assert_same(before: dict[str, object], after: dict[str, object]) -> None:
    assert before.keys() == after.keys()
    for key in before:
        a, b = before[key], after[key]
        if isinstance(a, torch.Tensor):
            assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), key  # bit for bit
        else:
            assert a == b, key


def attributes() -> dict[tuple[str, str], object]:
    """Every attribute of every runtime module and of the runtime's classes, by identity."""
    out = {}
    for module_name, module in sorted(sys.modules.items()):
        if module is None or not (module_name == "pvlab.runtime" or module_name.startswith("pvlab.runtime.")):
            continue
        for name, value in vars(module).items():
            out[(module_name, name)] = value
            if isinstance(value, type) and value.__module__ == module_name:
                for attr, raw in vars(value).items():
                    out[(f"{module_name}.{name}", attr)] = raw
    out[("pvlab.runtime.config", "PRESETS=")] = dict(runtime_config.PRESETS)
    out[("os", "environ")] = dict(os.environ)
    return out


@pytest.fixture(scope="module")
def baseline():
    return behaviour()


@pytest.fixture(autouse=True)
def _no_mutated_fixture_outlives_a_test():
    yield
    fixtures.clear()


# ---- the registry --------------------------------------------------------------------------------


def test_registry_matches_the_static_scan_and_is_documented():
    ws = load_workspace(ROOT)
    assert ws.mutants_module == planted.__name__
    declared = mutation.scan_mutant_names(mutation.module_path(ws))
    assert sorted(d.name for d in declared) == NAMES
    for entry in REGISTRY.values():
        assert entry.qualname == entry.name, "the generator is named like the mutant"
        assert len(entry.doc) > 80 and "Imitates" in entry.doc and "Seam" in entry.doc, entry.name


def test_the_seed_defects_are_all_planted():
    seeds = {"fast_path_drops_qkv_bias", "populate_drops_optional_tensors", "eval_reads_stale_train_buffer",
             "eval_targets_equal_inputs", "cross_entropy_off_by_one", "tied_head_uninitialised",
             "rope_wrong_theta", "rope_interleaved_pairs", "final_norm_skipped", "adamw_coupled_weight_decay",
             "greedy_decode_samples", "no_gpu_ignored", "kv_cache_off_by_one", "softmax_without_max_subtraction"}
    assert seeds <= set(NAMES)


def test_each_bug_is_planted_in_the_runtime_whose_seam_it_patches():
    """A bug at a seam of the pack's transformers adapter (its docstring's `Seam: pvpack...`) is
    planted in transformers, and in liger where the Liger adapter inherits the seam; every other
    bug patches pvlab's runtime, the project's default runtime (`runtimes=` left out)."""
    for name, entry in REGISTRY.items():
        seam = entry.doc.split("Seam")[1]
        if "pvpack.adapters.transformers" in seam:
            assert entry.runtimes and entry.runtimes[0] == "transformers" and "pvlab" not in entry.runtimes, name
            assert ("liger" in entry.runtimes) != ("train_step" in seam), name  # LigerModel overrides train_step
        else:
            assert entry.runtimes is None and "pvpack" not in seam, name


def test_only_no_gpu_ignored_is_limited_to_cuda():
    limited = {name: entry.factory.pv_devices for name, entry in REGISTRY.items()
               if getattr(entry.factory, "pv_devices", None)}
    assert limited == {"no_gpu_ignored": ("cuda",)}


# ---- restoration ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_the_runtime_is_itself_again_after_the_mutant(name, baseline):
    before = attributes()
    with REGISTRY[name]():
        assert planted.active() == [name]
        PROBES[name]()  # use the runtime while the bug is planted
    assert planted.active() == []
    assert attributes() == before
    assert_same(baseline, behaviour())


def test_restored_even_when_the_run_raises(baseline):
    before = attributes()
    with pytest.raises(ZeroDivisionError):
        with REGISTRY["final_norm_skipped"]():
            1 / 0
    assert attributes() == before
    assert_same(baseline, behaviour())


# ---- each mutant changes behaviour ---------------------------------------------------------------


def _rows_logits() -> torch.Tensor:
    return torch.randn(64, 40, generator=torch.Generator().manual_seed(0)) * 3


def probe_fast_path_drops_qkv_bias():
    with torch.no_grad():
        return tiny_model(path="fast")(tokens())


def probe_populate_drops_optional_tensors():
    source = tiny_model(seed=2)
    model = checkpoint.init_model(config=preset("tiny"), weights=checkpoint.model_tensors(source), parity_gate=False)
    biases = [name for name, _ in model.named_parameters() if name.endswith(".bias")]
    return model.populate_report.complete, len(biases)


def probe_eval_reads_stale_train_buffer():
    run = trainer.Trainer(tiny_model(), lr=1e-3)
    held_out = LMBatch.from_sequences(tokens(2, 13, seed=11))
    run.train_batch(LMBatch.from_sequences(tokens(2, 13, seed=12)))
    return round(run.eval_batch(held_out), 3)


def probe_eval_targets_equal_inputs():
    batch = LMBatch.from_sequences(tokens(2, 13, seed=13))
    return trainer.eval_targets(batch)


def probe_cross_entropy_off_by_one():
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 9, 30, generator=generator)
    hidden, weight = torch.randn(2, 9, 8, generator=generator), torch.randn(30, 8, generator=generator)
    targets = torch.randint(0, 30, (2, 9), generator=torch.Generator().manual_seed(2))
    return (kernels.cross_entropy_reference(logits, targets),
            kernels.chunked_linear_cross_entropy(hidden, weight, targets, chunk_tokens=4, compute_dtype=torch.float32))


def probe_tied_head_uninitialised():
    model = checkpoint.init_model(config="tiny", weights="random", parity_gate=False)
    return model.lm_head.weight is model.model.embed_tokens.weight, float(model.lm_head.weight.detach().abs().sum())


def probe_rope_wrong_theta():
    return kernels.rope_cos_sin(10000.0, 16, torch.arange(40))


def probe_rope_interleaved_pairs():
    return kernels.rotate_half(torch.arange(8.0))


def probe_final_norm_skipped():
    with torch.no_grad():
        return tiny_model().model(tokens())


def probe_adamw_coupled_weight_decay():
    parameter = torch.nn.Parameter(torch.ones(3, 3))
    optimizer = trainer.build_optimizer([("w", parameter)], lr=0.1, weight_decay=0.1, betas=(0.9, 0.95),
                                        path="reference", device=torch.device("cpu"))
    parameter.grad = torch.zeros(3, 3)
    optimizer.step()
    return parameter.detach().clone()


def probe_greedy_decode_samples():
    return kernels.pick_next_token(_rows_logits(), 0.0, None)


def probe_no_gpu_ignored():
    calls = []
    original = torch.cuda.is_available

    def spy():
        calls.append(1)
        return False

    torch.cuda.is_available = spy
    try:
        devices.resolve_device(None, allow_gpu=False)
        try:
            devices.resolve_device("cuda", allow_gpu=False)
            message = "accepted"
        except Exception as error:  # noqa: BLE001 - which refusal it is, is the probe
            message = str(error)
    finally:
        torch.cuda.is_available = original
    return len(calls), "--no-gpu" in message


def probe_kv_cache_off_by_one():
    return kernels.positions_for(5, 3, "cpu")


def probe_softmax_without_max_subtraction():
    scores = torch.tensor([[1e4, 0.0, -1e4], [2.0, 1.0, 0.0]])
    return kernels.softmax_reference(scores), kernels.log_softmax_reference(scores)


def _norm_input(scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(5)) * scale
    return x, torch.linspace(0.5, 2.0, 32)


def probe_rms_norm_eps_outside_sqrt():
    return kernels.rms_norm(*_norm_input(1e-4), 1e-6)


def probe_rms_norm_ignores_weight():
    return kernels.rms_norm(*_norm_input(1.0), 1e-6)


def probe_rms_norm_statistic_in_fp16():
    return kernels.rms_norm(*_norm_input(1e3), 1e-6)


def probe_rope_angles_in_bfloat16():
    return kernels.rope_cos_sin(10000.0, 16, torch.arange(517, 540))


def probe_softmax_normalises_wrong_axis():
    return kernels.softmax_reference(_rows_logits())


def probe_cross_entropy_counts_padding():
    generator = torch.Generator().manual_seed(6)
    logits, hidden = torch.randn(2, 5, 11, generator=generator), torch.randn(2, 5, 4, generator=generator)
    weight = torch.randn(11, 4, generator=generator)
    targets = torch.tensor([[1, 2, 3, 4, 5], [6, 7, -100, -100, -100]])
    return (kernels.cross_entropy_reference(logits, targets),
            kernels.chunked_linear_cross_entropy(hidden, weight, targets, chunk_tokens=3, compute_dtype=torch.float32))


def probe_cross_entropy_mean_over_batch_not_tokens():
    return probe_cross_entropy_off_by_one()


def _qkv(queries: int, keys: int):
    generator = torch.Generator().manual_seed(9)
    return (torch.randn(1, 4, queries, 8, generator=generator), torch.randn(1, 2, keys, 8, generator=generator),
            torch.randn(1, 2, keys, 8, generator=generator))


def probe_gqa_kv_heads_tiled():
    return kernels.attention_reference(*_qkv(6, 6)), kernels.attention_fast(*_qkv(6, 6))


def probe_attention_not_causal():
    return kernels.attention_reference(*_qkv(6, 6)), kernels.attention_fast(*_qkv(6, 6))


def probe_attention_mask_ignores_cache_offset():
    return kernels.attention_reference(*_qkv(3, 7)), kernels.attention_fast(*_qkv(3, 7))


def probe_adamw_decays_norms_and_biases():
    return trainer.decays("model.norm.weight", torch.nn.Parameter(torch.ones(4)))


def probe_parity_gate_compares_device_with_itself():
    a = torch.randn(1, 4, 10, generator=torch.Generator().manual_seed(1))
    return parity.compare_logits(a, -a, device="cpu", path="fast").min_cosine


def probe_init_accepts_unpaired_arguments():
    outcomes = []
    for kwargs in ({"config": "tiny"}, {"weights": "random"}):
        try:
            checkpoint.init_model(parity_gate=False, **kwargs)
            outcomes.append("accepted")
        except Exception as error:  # noqa: BLE001
            outcomes.append(type(error).__name__)
    return outcomes


def probe_llama_370m_preset_tied_head():
    return preset("llama-370m").num_parameters()


def probe_loader_reads_wrong_byte_order():
    source = tiny_model(seed=2)
    model = checkpoint.init_model(config=preset("tiny"), weights=checkpoint.model_tensors(source), parity_gate=False)
    return model.model.layers[0].self_attn.q_proj.weight.detach().clone()


def probe_head_padded_rows_unmasked():
    with torch.no_grad():
        return tuple(tiny_model()(tokens()).shape)


def probe_heldout_split_leaks_into_training():
    train, held_out = data.split_documents(data.synthetic_python_corpus(30, seed=1), val_fraction=0.2, seed=1)
    return len(data.overlapping_documents(train, held_out))


def probe_encoder_read_as_decoder():
    bert = {"architectures": ["BertForMaskedLM"], "model_type": "bert", "vocab_size": 512, "hidden_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 192,
            "max_position_embeddings": 256}
    try:
        return runtime_config.ModelConfig.from_hf_dict(bert).model_type
    except Exception as error:  # noqa: BLE001 - the refusal is the clean behaviour
        return type(error).__name__


# ---- probes of the planted bugs that replaced inline patches in the check tests -------------------

probe_cache_positions_restart_at_zero = probe_kv_cache_off_by_one
probe_rope_sin_one_position_ahead = probe_rope_wrong_theta
probe_rms_norm_returns_nan = probe_rms_norm_ignores_weight
probe_fast_path_reverses_output_features = probe_fast_path_drops_qkv_bias
probe_chunked_cross_entropy_drops_last_chunk = probe_cross_entropy_off_by_one  # 18 tokens in chunks of 4
probe_final_norm_outputs_zeros = probe_final_norm_skipped


PROBES = {name[len("probe_"):]: fn
          for name, fn in {**dict(globals()), **vars(equivalence_probes), **vars(distributed_probes),
                           **vars(oracle_mutant_probes), **vars(performance_probes), **vars(adapter_mutant_probes),
                           **vars(review_mutant_probes), **vars(third_mutant_probes), **vars(fourth_mutant_probes),
                           **vars(fifth_mutant_probes), **vars(sixth_mutant_probes),
                           **vars(seventh_mutant_probes), **vars(eighth_mutant_probes), **vars(ninth_mutant_probes),
                           **vars(tenth_mutant_probes), **vars(twelfth_mutant_probes),
                           **vars(domain_mutant_probes),
                           **vars(entrypoint_mutant_probes), **vars(behaviour_mutant_probes),
                           **vars(route_mutant_probes), **vars(master_weight_probes),
                           **vars(row_mutant_probes), **vars(training_mutant_probes)}.items()
          if name.startswith("probe_")}


def differs(a, b) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) != len(b) or any(differs(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
            return True
        return not torch.equal(a, b)
    return a != b


def test_every_mutant_has_a_probe():
    assert sorted(PROBES) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_the_mutant_changes_behaviour(name):
    clean = PROBES[name]()
    with REGISTRY[name]():
        mutated = PROBES[name]()
    assert differs(clean, mutated), f"{name} planted nothing the probe can see: {clean!r}"
    assert not differs(clean, PROBES[name]()), f"{name} left something behind"


# ---- the machinery around the patches ------------------------------------------------------------


def test_a_checkpoint_cache_build_runs_with_the_mutant_lifted(tmp_path):
    seen = {}

    def build(out: Path) -> dict:
        out.mkdir()
        seen["final_norm"] = __import__("pvlab.runtime.model").runtime.model.apply_final_norm.__qualname__
        return {}

    clean_name = __import__("pvlab.runtime.model").runtime.model.apply_final_norm.__qualname__
    with REGISTRY["final_norm_skipped"]():
        zoo.build_cached("probe", "0" * 16, build, cache_dir=tmp_path)
        mutated_name = __import__("pvlab.runtime.model").runtime.model.apply_final_norm.__qualname__
    assert seen["final_norm"] == clean_name == "apply_final_norm"
    assert mutated_name != clean_name  # planted again after the build


def test_a_cache_build_under_nested_mutants_is_clean_and_leaves_nothing_behind(tmp_path):
    from pvlab.runtime import model as runtime_model

    seen = {}

    def build(out: Path) -> dict:
        out.mkdir()
        seen["inside"] = (runtime_model.apply_final_norm.__qualname__, kernels.rope_cos_sin.__qualname__)
        return {}

    before = attributes()
    with REGISTRY["final_norm_skipped"](), REGISTRY["rope_wrong_theta"]():
        zoo.build_cached("probe", "1" * 16, build, cache_dir=tmp_path)
        planted_again = (runtime_model.apply_final_norm.__qualname__, kernels.rope_cos_sin.__qualname__)
    assert seen["inside"] == ("apply_final_norm", "rope_cos_sin")
    assert planted_again == ("final_norm_skipped.<locals>.apply_final_norm", "rope_wrong_theta.<locals>.rope_cos_sin")
    assert attributes() == before


def test_check_caches_are_dropped_when_the_planted_bugs_change_and_kept_while_they_do_not():
    clean = fixtures.random_model("tiny", seed=5)
    assert fixtures.random_model("tiny", seed=5) is clean
    name = "tied_head_uninitialised"
    built = []
    for _ in range(2):  # what the plugin does: enter the one mutant around each check call
        with REGISTRY[name]():
            assert mutation.planted() == (name,)
            built.append(fixtures.random_model("tiny", seed=5))
    assert built[0] is not clean, "a clean model was reused under the bug"
    assert built[0].lm_head.weight is not built[0].model.embed_tokens.weight  # built with the bug
    assert built[1] is built[0], "the same bug planted again: the cache is kept"
    again = fixtures.random_model("tiny", seed=5)
    assert again is not built[0] and again.lm_head.weight is again.model.embed_tokens.weight
    with REGISTRY[name](), REGISTRY["final_norm_skipped"]():  # a second bug inside the first
        assert fixtures.random_model("tiny", seed=5) not in (built[0], again)


CHILD = "from pvlab.runtime import devices; print(devices.resolve_device.__qualname__)"


def test_a_child_python_process_gets_the_same_mutants():
    assert python_command("-c", CHILD) == [sys.executable, "-c", CHILD]
    assert python_args("-m", "pvlab.runtime", "x") == ["-m", "pvlab.runtime", "x"]
    with REGISTRY["no_gpu_ignored"](), REGISTRY["final_norm_skipped"]():
        assert python_args("-m", "pvlab.runtime", "x") == [
            "-m", "pvlab.falsifiers.mutants.child", "no_gpu_ignored,final_norm_skipped", "--", "-m", "pvlab.runtime", "x"]
        command = python_command("-c", "import sys; from pvlab.runtime import devices, model; "
                                 "print(devices.resolve_device.__qualname__); "
                                 "print(model.apply_final_norm.__qualname__, sys.argv[1:])", "x", "--y")
    assert command[:5] == [sys.executable, "-m", "pvlab.falsifiers.mutants.child", "no_gpu_ignored,final_norm_skipped",
                           "--"]
    child = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert child.returncode == 0, child.stderr
    assert child.stdout.split("\n")[:2] == ["no_gpu_ignored.<locals>.resolve_device",
                                            "final_norm_skipped.<locals>.apply_final_norm ['x', '--y']"], child.stderr
    clean = subprocess.run(python_command("-c", CHILD), capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert clean.stdout.split() == ["resolve_device"], clean.stderr


def test_the_child_runs_modules_keeps_exit_codes_and_refuses_unknown_mutants():
    run = [sys.executable, "-m", "pvlab.falsifiers.mutants.child"]
    module = subprocess.run([*run, "rope_wrong_theta", "--", "-m", "pvlab.runtime", "no-such-command"],
                            capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert module.returncode == 2 and "no-such-command" in module.stderr  # the runtime CLI's own usage error
    exits = subprocess.run([*run, "rope_wrong_theta", "--", "-c", "raise SystemExit(7)"], capture_output=True,
                           text=True, cwd=ROOT, timeout=120)
    assert exits.returncode == 7, exits.stderr
    unknown = subprocess.run([*run, "rope_wrong_thetaa", "--", "-c", "pass"], capture_output=True, text=True,
                             cwd=ROOT, timeout=120)
    assert unknown.returncode == 2 and "did you mean 'rope_wrong_theta'" in unknown.stderr


def test_checks_start_python_only_through_python_command():
    """A check that ran `sys.executable` itself would start an unplanted child: blind to the bug."""
    import ast

    offenders = []
    for file in sorted((ROOT / "pvlab").rglob("*.py")):
        if file.name == "child.py" and file.parent.name == "mutants":
            continue
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "executable" \
                    and isinstance(node.value, ast.Name) and node.value.id == "sys":
                offenders.append(f"{file.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []
