"""The attention check, `packcli.verify.attention.check_packs`: any pack layout passes, a report in JSON, bad
setups raise. Each backend, control and runner has its file (tests/test_verify_attention_<module>.py).

Each negative case is a real leak fed through the real check (no mocked results): ``naive``
attention, HF calls with an attention_mask or a KV cache next to packed position_ids, positions
that keep counting across seams, and a supervised label at a seam. A test fails if the check
passes any of them.
"""

from __future__ import annotations

import json

import pytest
from conftest import attention_pack
from hypothesis import example, given, settings
from hypothesis import strategies as st

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]
torch = pytest.importorskip("torch")

from packcli.verify.attention import TOLERANCES, UnsupportedBackendError, check_packs  # noqa: E402


@settings(max_examples=12, deadline=None)
@given(lengths=st.lists(st.integers(1, 12), min_size=2, max_size=5), seed=st.integers(0, 2**16))
@example(lengths=[1, 2], seed=0)  # the control's q_proj gradient is exactly 0 here: no scale to be relative to
def test_sdpa_passes_on_any_pack_layout(lengths, seed):
    """Property: one-token examples, fully masked examples, any lengths: a seam-aware backend
    always matches the control (the check has no false alarms to tune away)."""
    report = check_packs([attention_pack(lengths, seed)], backends=["sdpa"], reduction="example_mean")
    assert report.ok, report.results[0].evidence


# ATEN_CPU_CAPABILITY picks torch's CPU kernels: "default" (no vector unit) rounds otherwise than the
# AVX2/AVX-512 kernels a developer's machine picks, as another CI machine's CPU does. Under
# "default" a relative gradient tolerance reported lengths=[1, 2] as leaking "by inf".


def test_bf16_uses_its_pinned_tolerance_and_still_catches_naive(attention_packs):
    report = check_packs(attention_packs, backends=["sdpa", "naive"], dtype="bfloat16")
    assert report.result("sdpa").ok, report.result("sdpa").evidence
    assert report.result("sdpa").tolerance == TOLERANCES["bfloat16"]
    assert not report.result("naive").ok


def test_bad_requests_are_all_reported_at_once(attention_packs):
    with pytest.raises(UnsupportedBackendError) as info:
        check_packs(attention_packs, backends=["sdpa", "xformers", "hf:eager+nope"], dtype="float8")
    message = str(info.value)
    assert "'float8'" in message and "'xformers'" in message and "'hf:eager+nope'" in message


def test_cuda_requested_without_cuda_raises(attention_packs):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(UnsupportedBackendError, match="sees no CUDA device"):
        check_packs(attention_packs, backends=["sdpa"], device="cuda")


def test_packs_without_a_seam_are_refused():
    with pytest.raises(ValueError, match="seam"):
        check_packs([attention_pack([9], 0)], backends=["sdpa"])


def test_report_is_json_with_tolerance_versions_and_evidence(attention_report):
    data = json.loads(json.dumps(attention_report.to_dict()))
    assert data["ok"] is False  # naive and the traps leak
    naive = next(r for r in data["results"] if r["backend"] == "naive")
    assert naive["tolerance"]["logits_atol"] == TOLERANCES["float32"].logits_atol
    assert naive["versions"]["torch"] == torch.__version__ and naive["evidence"]
    hf = next(r for r in data["results"] if r["backend"] == "hf:sdpa")
    assert hf["versions"]["attn_implementation"] == "sdpa" and "transformers" in hf["versions"]


def test_gpu_check_script_cpu_path_writes_json_and_prints_the_table_last(tmp_path, capsys):
    from conftest import load_script

    gpu_check = load_script("gpu_check")
    out = tmp_path / "gpu_check.json"
    rc = gpu_check.main(["--device", "cpu", "--backends", "sdpa,naive,torch-varlen", "--dtypes", "float32",
                         "--packs", "1", "--json", str(out)])
    assert rc == 0  # sdpa passed, naive was caught, torch-varlen is an 'unsupported' row
    rows = {r["backend"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["sdpa"]["ok"] and not rows["naive"]["ok"] and rows["torch-varlen"]["status"] == "unsupported"
    stdout = capsys.readouterr().out
    assert stdout.splitlines()[0].startswith("backend") and "LEAK (as it must)" in stdout
