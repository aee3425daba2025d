"""The LLM agent through litellm's real HTTP path, against a scripted OpenAI-compatible server on
127.0.0.1 (tests/llm_support.py, in a thread): good answers, garbage, code that does not parse, the wrong
signature, answers slower than the timeout, 429 with Retry-After, 500s; token and cost accounting;
the API key sent to the server but never kept or logged; and one whole optimize session through the
loop with `agent="openai/test-model"`."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from pathlib import Path

import pytest

from autokernel.engine.agents.base import AgentContext, Measurement, Tried
from autokernel.engine.errors import UserError
from llm_support import llm_server  # noqa: F401  (a fixture)

SECRET = "sk-test-secret-7f3a9c"
STARTER = (Path(__file__).resolve().parents[1] / "kernels" / "softmax" / "starter_triton.py").read_text()

GOOD_KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def _softmax(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    e = tl.where(mask, e, 0.0)
    tl.store(y_ptr + row * n_cols + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    _softmax[(x2.shape[0],)](x2, y, x2.shape[1], x2.stride(0), BLOCK=triton.next_power_of_2(x2.shape[1]), num_warps=8)
    return y.reshape(x.shape)
'''


def good_answer(code: str = GOOD_KERNEL, title: str = "Eight warps per row") -> str:
    return (f"Here is my proposal.\n\n**TIER:** 1\n**TITLE:** {title}\nHYPOTHESIS: the parent reaches 41% of "
            f"bandwidth with 4 warps;\nmore warps keep more loads in flight.\nVARIANT: num_warps=8\n"
            f"```python\n{code}```\n")


GARBAGE = "I think you should use more warps. Good luck!"
UNPARSEABLE = good_answer("import triton\n@triton.jit\ndef k(x:\n    pass\ndef kernel_fn(x):\n    return x\n")
WRONG_SIGNATURE = good_answer(GOOD_KERNEL.replace("def kernel_fn(x):", "def kernel_fn(x, dim):"))


def make_agent(server, model="openai/test-model", **kw):
    from autokernel.engine.agents.llm import LLMAgent

    kw.setdefault("backoff_s", 0.05)
    kw.setdefault("timeout_s", 20)
    return LLMAgent(model, api_base=server.api_base, api_key=SECRET, **kw)


def softmax_context(**kw) -> AgentContext:
    parent = Measurement(candidate_id="softmax-0001", label="starter", passed=True, kernel_ms=0.8,
                         fraction_of_ceiling=0.41, speedup_eager=1.1, speedup_compile=0.9)
    tried = Tried(tier=1, title="Sixteen warps", hypothesis="more warps", parent_id="softmax-0001",
                  results=[Measurement(candidate_id="softmax-0002", label="num_warps=16", passed=False,
                                       failure="edge_cases: max abs error 0.5 at rows=1, cols=1")])
    fields = dict(kernel="softmax", backend="triton", device="cpu", device_name="test cpu",
                  shape={"rows": 4096, "cols": 4096}, dtype="bf16", parent_id="softmax-0001", parent_source=STARTER,
                  parent_params={}, parent_measurement=parent, best=parent, pool=[("softmax-0001", parent)],
                  history=[tried], round=2, max_ideas=3, max_variants=3, hint="try fewer programs")
    fields.update(kw)
    return AgentContext(**fields)


def test_good_answer_becomes_an_idea_and_the_prompt_carries_what_was_measured(llm_server):
    llm_server.play({"content": good_answer(), "prompt_tokens": 1234, "completion_tokens": 321})
    agent = make_agent(llm_server)
    ideas = agent.propose(softmax_context())
    assert len(ideas) == 1 and len(ideas[0].variants) == 1
    idea = ideas[0]
    assert (idea.tier, idea.title) == (1, "Eight warps per row")
    assert idea.hypothesis.startswith("the parent reaches 41% of bandwidth") and "in flight" in idea.hypothesis
    assert idea.variants[0].source == GOOD_KERNEL and idea.variants[0].label == "num_warps=8"
    assert agent.failures == [] and agent.retries == []
    # the request went through litellm's HTTP path with the key in the header
    (req,) = llm_server.requests
    assert req["path"] == "/v1/chat/completions" and req["body"]["model"] == "test-model"
    assert req["headers"]["Authorization"] == f"Bearer {SECRET}"
    prompt = llm_server.user_messages(0)[0]
    for expected in ("kernel_fn(x)", "torch.softmax(x.to(work), dim=-1)",  # signature, reference source
                     "_softmax_rows_kernel",  # the parent's source
                     "0.8 ms", "41.0% of the device ceiling", "1.1x vs eager", "0.9x vs torch.compile",
                     "Sixteen warps", "edge_cases: max abs error 0.5",  # history with the failure's stage
                     "rows=4096, cols=4096, dtype bf16", "try fewer programs", "up to 3 new ideas"):
        assert expected in prompt, expected
    system = req["body"]["messages"][0]
    assert system["role"] == "system" and "TIER:" in system["content"] and "```python" in system["content"]
    assert "Playbook: tier 1 (launch shape" in prompt or "Playbook: tier 1 (" in prompt  # one tier-1 idea tried so far
    # usage
    assert (agent.usage.prompt_tokens, agent.usage.completion_tokens, agent.usage.calls) == (1234, 321, 1)
    assert agent.usage.cost_usd == 0.0 and "no price" in agent.usage.note
    assert agent.last_usage.prompt_tokens == 1234


def test_bad_answers_are_recorded_and_retried_with_the_error(llm_server):
    llm_server.play(GARBAGE, UNPARSEABLE, WRONG_SIGNATURE, good_answer())
    agent = make_agent(llm_server, fix_attempts=3)
    notes = []
    agent.on_note = notes.append
    ideas = agent.propose(softmax_context())
    assert [i.title for i in ideas] == ["Eight warps per row"]
    assert len(notes) == 3 and all("unusable" in n and "asking again" in n for n in notes)
    reasons = [f.reason for f in agent.failures]
    assert len(reasons) == 3, reasons
    assert "no ```python code block" in reasons[0]
    assert "does not parse: line 3" in reasons[1]
    assert "wrong signature: kernel_fn(x, dim)" in reasons[2] and "expected kernel_fn(x)" in reasons[2]
    assert agent.failures[0].excerpt == GARBAGE and [f.attempt for f in agent.failures] == [0, 1, 2]
    # each retry carries the whole conversation and the reason the last answer was refused
    assert len(llm_server.requests) == 4
    assert "no ```python code block" in llm_server.user_messages(1)[-1]
    assert "does not parse" in llm_server.user_messages(2)[-1]
    assert "wrong signature" in llm_server.user_messages(3)[-1]
    assert len(llm_server.requests[3]["body"]["messages"]) == 2 + 2 * 3
    assert agent.usage.calls == 4 and agent.last_usage.calls == 4


def test_the_usable_part_of_an_answer_goes_on_and_the_rest_is_recorded(llm_server):
    llm_server.play(good_answer() + WRONG_SIGNATURE.replace("Eight warps per row", "Two args"))
    agent = make_agent(llm_server)
    notes = []
    agent.on_note = notes.append
    ideas = agent.propose(softmax_context())
    assert [i.title for i in ideas] == ["Eight warps per row"] and len(llm_server.requests) == 1
    assert [f.reason.split(":")[0] for f in agent.last_failures] == ["idea 'Two args'"]
    assert len(notes) == 1 and "1 part(s) of the answer rejected: idea 'Two args': wrong signature" in notes[0]


def test_only_bad_answers_fail_the_proposal_after_bounded_retries(llm_server):
    from autokernel.engine.agents.llm import ProposalFailed

    llm_server.play(GARBAGE, "```python\n```", good_answer())
    agent = make_agent(llm_server, fix_attempts=1)
    with pytest.raises(ProposalFailed, match="2 answers .* had no usable kernel"):
        agent.propose(softmax_context())
    assert len(llm_server.requests) == 2 and len(agent.last_failures) == 2
    assert "empty" in agent.last_failures[1].reason


def test_slow_answer_times_out_then_the_retry_succeeds(llm_server):
    # the slow answer is far past the timeout, the timeout far past what an answer takes on a loaded box
    # (at 0.8 s the prompt retry itself timed out while two test suites shared two cores)
    llm_server.play({"content": good_answer(), "delay": 60}, good_answer(title="After the timeout"))
    agent = make_agent(llm_server, timeout_s=6)
    ideas = agent.propose(softmax_context())
    assert ideas[0].title == "After the timeout"  # the slow answer was not waited for
    assert len(agent.retries) == 1 and "Timeout" in agent.retries[0][0]
    assert agent.usage.failed_calls == 1 and agent.usage.calls == 1
    assert len(llm_server.requests) == 2


def test_rate_limit_and_server_error_back_off_then_succeed(llm_server):
    llm_server.play({"status": 429, "error": "slow down", "headers": {"Retry-After": "1"}},
                    {"status": 500, "error": "boom"}, good_answer())
    agent = make_agent(llm_server)
    notes = []
    agent.on_note = notes.append
    ideas = agent.propose(softmax_context())
    assert len(notes) == 2 and "RateLimitError (429)" in notes[0] and "retrying in" in notes[0]
    assert ideas and len(llm_server.requests) == 3
    (first, d1), (second, d2) = agent.retries
    assert "RateLimitError" in first and d1 >= 1.0  # Retry-After honoured over a 0.05 s backoff
    assert "500" in second and 0.05 <= d2 <= 0.1  # second attempt: 0.05 * 2, jittered down to half


def test_cancel_cuts_a_long_retry_after_short(llm_server):
    from autokernel.engine.agents.llm import LLMUnavailable

    llm_server.play({"status": 429, "error": "come back in a minute", "headers": {"Retry-After": "60"}}, good_answer())
    agent = make_agent(llm_server)
    agent.on_note = lambda line: threading.Timer(0.2, agent.cancel).start()
    with pytest.raises(LLMUnavailable, match="cancelled while waiting to retry"):  # not after the 60 s wait
        agent.propose(softmax_context())
    assert agent.retries[0][1] == 60
    with pytest.raises(LLMUnavailable, match="cancelled"):  # for good: the next seed asks nobody
        agent.propose(softmax_context())
    assert len(llm_server.requests) == 1


def test_stopping_a_session_ends_an_llm_wait(llm_server, tmp_path, monkeypatch):
    from autokernel.engine.session import OptimizeSession, SessionConfig
    from autokernel.engine.store import Store

    from loop_doubles import FakeWorker, fake_profiler

    _fake_softmax_spec(tmp_path, monkeypatch)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    llm_server.play()
    llm_server.default = {"status": 429, "error": "later", "headers": {"Retry-After": "60"}}
    model = tmp_path / "model.py"
    model.write_text("# the fake profiler never reads this\n")
    config = SessionConfig(model_path=str(model), device="cpu", agent="openai/test-model",
                           api_base=llm_server.api_base, integrate=False)
    session = OptimizeSession(config, Store(tmp_path / "sessions.db"), worker=FakeWorker(),
                              profiler=fake_profiler(("softmax",)))
    box = {}
    thread = threading.Thread(target=lambda: box.update(summary=session.run()))
    try:
        thread.start()
        deadline = time.monotonic() + 60
        while not llm_server.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        session.stop()
        thread.join(30)  # half the server's Retry-After: the wait was cut short, not sat out
    finally:
        llm_server.default = None
    assert not thread.is_alive()
    assert box["summary"]["status"] == "stopped" and len(llm_server.requests) == 1


def test_retries_are_bounded_and_auth_errors_are_not_retried(llm_server):
    from autokernel.engine.agents.llm import LLMUnavailable

    llm_server.play(*[{"status": 503, "error": "overloaded"}] * 3, good_answer())
    agent = make_agent(llm_server, max_retries=2)
    with pytest.raises(LLMUnavailable, match="gave up after 3 tries"):
        agent.propose(softmax_context())
    assert len(llm_server.requests) == 3 and len(agent.retries) == 2
    llm_server.play({"status": 401, "error": f"Incorrect API key provided: {SECRET}"}, good_answer())
    with pytest.raises(LLMUnavailable) as info:
        agent.propose(softmax_context())
    assert len(llm_server.requests) == 1 and SECRET not in str(info.value)


def test_tokens_and_cost_of_a_priced_model_add_up(llm_server):
    import litellm

    llm_server.play({"content": good_answer(), "prompt_tokens": 10_000, "completion_tokens": 2_000},
                    {"content": good_answer(), "prompt_tokens": 5_000, "completion_tokens": 1_000})
    agent = make_agent(llm_server, model="openai/gpt-4o-mini")
    agent.propose(softmax_context())
    first = agent.last_usage.cost_usd
    agent.propose(softmax_context())
    price = litellm.model_cost["gpt-4o-mini"]
    expected = 15_000 * price["input_cost_per_token"] + 3_000 * price["output_cost_per_token"]
    assert agent.usage.prompt_tokens == 15_000 and agent.usage.completion_tokens == 3_000
    assert agent.usage.cost_usd == pytest.approx(expected) and first == pytest.approx(2 * agent.last_usage.cost_usd)
    assert agent.usage.cost_usd > 0 and agent.usage.note == ""
    old = make_agent(llm_server, model="openai/gpt-3.5-turbo", max_tokens=8192)
    assert old.max_tokens == litellm.get_model_info("openai/gpt-3.5-turbo")["max_output_tokens"] < 8192
    llm_server.play(good_answer())
    old.propose(softmax_context())
    assert llm_server.requests[0]["body"]["max_tokens"] == old.max_tokens


def test_the_key_is_sent_but_never_kept_or_logged(llm_server, caplog, capfd):
    import litellm
    from autokernel.engine.agents.llm import LLMUnavailable

    caplog.set_level(logging.DEBUG)
    litellm._turn_on_debug()
    try:
        llm_server.play({"status": 429, "error": f"rate limited for key {SECRET}"}, GARBAGE,
                        {"content": f"TIER: 1\nTITLE: t\n```python\nkey = '{SECRET}'\n```"}, good_answer(),
                        {"status": 400, "error": f"bad request from {SECRET}"})
        agent = make_agent(llm_server, fix_attempts=3)
        notes = []
        agent.on_note = notes.append
        ideas = agent.propose(softmax_context())
        with pytest.raises(LLMUnavailable) as info:
            agent.propose(softmax_context())
    finally:
        litellm.suppress_debug_info = True
        logging.getLogger("LiteLLM").setLevel(logging.WARNING)
    assert all(r["headers"]["Authorization"] == f"Bearer {SECRET}" for r in llm_server.requests)
    out, err = capfd.readouterr()
    kept = [repr(agent), json.dumps(agent.describe()), repr(agent.failures), repr(agent.retries),
            repr(vars(agent)), repr(agent.usage), str(info.value), caplog.text, out, err, repr(notes),
            repr([dataclasses.asdict(i) for i in ideas])]
    assert agent.failures and agent.retries and caplog.text and len(notes) == 3
    for text in kept:
        assert SECRET not in text
    assert agent.describe()["api_key"] == "***"


def test_bad_model_strings_are_one_line_user_errors(llm_server, monkeypatch):
    from autokernel.engine.agents.llm import LLMAgent

    with pytest.raises(UserError, match="does not know the model 'no-such-provider/x'"):
        LLMAgent("no-such-provider/x")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(UserError, match="no API key for anthropic/claude-sonnet-4: set ANTHROPIC_API_KEY"):
        LLMAgent("anthropic/claude-sonnet-4")
    with pytest.raises(UserError):
        LLMAgent("")


def _fake_softmax_spec(tmp_path, monkeypatch):
    """The real softmax spec with a starter the fake worker can judge (`# fake ms=1.0`)."""
    import autokernel.kernels as kernels

    spec = kernels.get_spec("softmax")
    starter = tmp_path / "starter_triton.py"
    starter.write_text("# fake ms=1.0 fail= tag=starter\n" + STARTER)
    fake = dataclasses.replace(spec, starters={"triton": starter})
    monkeypatch.setattr(kernels, "available", lambda: ["softmax"])
    monkeypatch.setattr(kernels, "get_spec", lambda name: fake)


def test_a_session_with_an_llm_agent_runs_through_the_loop(llm_server, tmp_path, monkeypatch):
    """`agent="openai/test-model"` and `api_base` (the CLI's --api-base) built into an agent by the session
    itself, the key from OPENAI_API_KEY; fake worker and profiler keep it fast. The key never reaches the store."""
    from autokernel.engine import events as ev
    from autokernel.engine.session import OptimizeSession, SessionConfig
    from autokernel.engine.store import Store

    from loop_doubles import FakeWorker, fake_profiler

    _fake_softmax_spec(tmp_path, monkeypatch)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    llm_server.play({"content": good_answer("# fake ms=0.5 fail= tag=llm\n" + GOOD_KERNEL), "prompt_tokens": 900,
                     "completion_tokens": 100})
    llm_server.default = {"content": GARBAGE, "prompt_tokens": 50, "completion_tokens": 5}
    try:
        store = Store(tmp_path / "sessions.db")
        config = SessionConfig(model_path=str(tmp_path / "model.py"), device="cpu", agent="openai/test-model",
                               api_base=llm_server.api_base, integrate=False, max_experiments=10)
        Path(config.model_path).write_text("# the fake profiler never reads this\n")
        session = OptimizeSession(config, store, worker=FakeWorker(), profiler=fake_profiler(("softmax",)))
        summary = session.run()
    finally:
        llm_server.default = None
    sid = session.session_id
    events = [e for _, e in store.events(sid)]
    ideas = [e for e in events if isinstance(e, ev.IdeaProposed)]
    assert [(i.agent, i.title) for i in ideas] == [("openai/test-model", "Eight warps per row")]
    kept = [e for e in events if isinstance(e, ev.Decision) and e.decision == "kept"]
    assert [d.candidate_id for d in kept] == ["softmax-0001", "softmax-0002"]
    errors = [e for e in events if isinstance(e, ev.ErrorEvent)]
    assert errors and all("ProposalFailed" in e.message and "no ```python code block" in e.message for e in errors)
    notes = [e.message for e in events if isinstance(e, ev.Log) and "asking again" in e.message]
    assert notes and all(SECRET not in n for n in notes)  # the session routes the agent's re-asks to the log
    usage = [e for e in events if isinstance(e, ev.LLMUsage)]
    assert sum(u.prompt_tokens for u in usage) == 900 + 50 * (len(llm_server.requests) - 1)
    assert summary["status"] == "completed"
    store.close() if hasattr(store, "close") else None
    for path in tmp_path.glob("sessions.db*"):
        assert SECRET.encode() not in path.read_bytes()


# -- reading answers (no server, no litellm) ------------------------------------------------------

def _parse(text, signature="kernel_fn(x)", backend="triton", **kw):
    from autokernel.engine.agents.llm_answers import parse_answer

    return parse_answer(text, signature, backend, default_tier=3, **kw)


def test_several_ideas_and_variants_in_loose_markdown():
    other = GOOD_KERNEL.replace("num_warps=8", "num_warps=4")
    text = (f"## Idea 1\nTIER: 2\nTITLE: Vector loads\nHYPOTHESIS: 41% of bandwidth.\n\n"
            f"VARIANT: v4\n```py\n{GOOD_KERNEL}```\n"
            f"VARIANT: v8\n```python\n{other}```\n\n## Idea 2\n**TIER**: 9\n**TITLE**: Two rows per program\n"
            f"HYPOTHESIS: small rows waste lanes\n```python\n{other.replace('BLOCK=', 'BLOCK=2*')}```\n")
    ideas, rejected = _parse(text)
    assert rejected == []
    assert [(i.tier, i.title, [v.label for v in i.variants]) for i in ideas] == [
        (2, "Vector loads", ["v4", "v8"]),
        (3, "Two rows per program", ["Two rows per program v1"])]  # tier 9 is not a tier: the default
    assert len(_parse(text, max_ideas=1)[0]) == 1 and len(_parse(text, max_variants=1)[0][0].variants) == 1


def test_reasoning_drafts_and_windows_line_ends_are_read_through():
    draft = "<think>maybe this?\n```python\ndef kernel_fn(x, y):\n    pass\n```\n</think>\n"
    text = draft + f"TIER: 1\nTITLE: t\nHYPOTHESIS: h\n```python\n{GOOD_KERNEL}```\n".replace("\n", "\r\n")
    ideas, rejected = _parse(text)
    assert rejected == [] and len(ideas) == 1 and ideas[0].variants[0].source == GOOD_KERNEL


def test_code_without_headers_is_still_one_idea():
    ideas, rejected = _parse(f"Sure! Here is a faster kernel:\n```python\n{GOOD_KERNEL}```")
    assert rejected == [] and ideas[0].tier == 3 and ideas[0].title == "Sure! Here is a faster kernel:"


@pytest.mark.parametrize("code, reason", [
    (GOOD_KERNEL.replace("@triton.jit\n", ""), "no @triton.jit kernel"),
    ("import torch\ndef kernel_fn(x):\n    return torch.softmax(x, -1)\n", "does not import triton"),
    ("import triton\n", "no top-level function kernel_fn"),
    (GOOD_KERNEL.replace("def kernel_fn(x):", "def kernel_fn(inp):"), "wrong signature: kernel_fn(inp)"),
    ("import subprocess\n" + GOOD_KERNEL, "imports subprocess"),
    (GOOD_KERNEL.replace("    x2 = ", "    open('/tmp/leak', 'w')\n    x2 = "), "calls open()"),
    (GOOD_KERNEL.replace("import torch\n", "import torch\nimport os\nos.system('true')\n"), "calls os.system()"),
    ("", "empty"),
])
def test_each_bad_file_is_rejected_with_a_reason(code, reason):
    ideas, rejected = _parse(f"TIER: 1\nTITLE: t\nHYPOTHESIS: h\n```python\n{code}```\n")
    assert ideas == [] and len(rejected) == 1 and reason in rejected[0].reason, rejected


def test_signature_defaults_and_the_parent_repeated():
    from autokernel.engine.agents.llm_answers import check_source

    sig = "kernel_fn(x, weight, eps=1e-6)"
    head = "import triton\n@triton.jit\ndef k(p):\n    pass\n"
    assert check_source(head + "def kernel_fn(x, weight, eps=1e-6):\n    pass\n", sig, "triton") is None
    assert check_source(head + "def kernel_fn(x, weight, eps=1e-5, block=None):\n    pass\n", sig, "triton") is None
    assert "gives eps no default" in check_source(head + "def kernel_fn(x, weight, eps):\n    pass\n", sig, "triton")
    assert "wrong signature" in check_source(head + "def kernel_fn(x):\n    pass\n", sig, "triton")
    cuda = "from torch.utils.cpp_extension import load_inline\ndef kernel_fn(x):\n    pass\n"
    assert check_source(cuda, "kernel_fn(x)", "cuda") is None
    assert "does not build a CUDA kernel" in check_source(GOOD_KERNEL, "kernel_fn(x)", "cuda")
    ideas, rejected = _parse(f"TIER: 1\nTITLE: same\n```python\n{STARTER}```", known_sources=[STARTER])
    assert ideas == [] and "repeats the parent" in rejected[0].reason


def test_every_starter_in_the_library_passes_the_answer_checks():
    from autokernel.engine.agents.llm_answers import check_source
    from autokernel.kernels import all_specs

    checked = {(s.name, b): check_source(p.read_text(), s.signature, b)
               for s in all_specs() for b, p in s.starters.items()}
    assert checked and all(reason is None for reason in checked.values()), checked


def test_the_prompt_moves_through_the_tiers():
    from autokernel.engine.agents.prompts import current_tier

    def tried(*tiers):
        return [Tried(tier=t, title="", hypothesis="", parent_id=None, results=[]) for t in tiers]

    assert current_tier([]) == 1 and current_tier(tried(1)) == 1 and current_tier(tried(1, 1)) == 2
    assert current_tier(tried(1, 1, 3, 3, 2)) == 2 and current_tier(tried(*[t for t in range(1, 7) for _ in "ab"])) == 6


def test_importing_the_engine_does_not_import_litellm():
    import subprocess
    import sys

    code = ("import sys, autokernel.engine.cli, autokernel.engine.agents.llm, autokernel.engine.session; "
            "sys.exit('litellm' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


def test_credentials_in_the_api_base_are_kept_out_of_describe(llm_server):
    from autokernel.engine.agents.llm import LLMAgent, redact_url

    assert redact_url("https://bob:hunter22@llm.example:8443/v1?api-key=abcdef") == "https://llm.example:8443/v1"
    agent = LLMAgent("openai/test-model", api_base="http://bob:hunter22@127.0.0.1:1/v1?api-key=abcdef")
    described = json.dumps(agent.describe())
    assert "hunter22" not in described and "abcdef" not in described and "127.0.0.1:1/v1" in described
    assert agent.describe()["api_key"] == "from the environment"
    assert agent.redact("auth bob:hunter22 key api-key=abcdef") == "auth bob:*** key ***"


def test_the_cli_runs_an_llm_session_against_a_local_server(llm_server, tmp_path):
    """`autokernel optimize --agent openai/test-model --api-base URL` as a user types it: the real profiler,
    worker and harness on a one-softmax model; the LLM's kernel passes the real checks."""
    import os
    import subprocess
    import sys

    from autokernel.engine import events as ev
    from autokernel.engine.store import Store

    model = tmp_path / "softmax_model.py"
    model.write_text("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                     "        return torch.softmax(x * 2.0, dim=-1)\n\n\ndef get_inputs():\n"
                     "    return [torch.randn(64, 512)]\n")
    llm_server.play(good_answer())
    db = tmp_path / "s.db"
    env = dict(os.environ, OPENAI_API_KEY=SECRET, AUTOKERNEL_CACHE_DIR=str(tmp_path / "cache"))
    cmd = [sys.executable, "-m", "autokernel.engine.cli", "optimize", str(model), "--headless", "--device", "cpu",
           "--agent", "openai/test-model", "--api-base", llm_server.api_base, "--max-experiments", "2",
           "--no-integrate", "--db", str(db)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[t1] Eight warps per row: num_warps=8" in proc.stdout and "[+++++]" in proc.stdout, proc.stdout
    assert SECRET not in proc.stdout + proc.stderr
    assert len(llm_server.requests) == 1
    assert llm_server.requests[0]["headers"]["Authorization"] == f"Bearer {SECRET}"
    store = Store(db)
    (sid,) = [s["id"] for s in store.sessions()]
    usage = [e for _, e in store.events(sid) if isinstance(e, ev.LLMUsage)]
    assert [(u.prompt_tokens, u.completion_tokens) for u in usage] == [(1000, 200)]
    for path in tmp_path.glob("s.db*"):
        assert SECRET.encode() not in path.read_bytes()
