"""The LLM agent: any litellm model string proposes kernels from what was measured.

One `propose` call sends the prompt of `prompts.py` (spec, parent kernel and its timing, the best
kernels, every idea tried with its result, the current playbook tier) and reads the answer with
`llm_answers.py`. An answer with nothing usable (no code, code that does not parse, the wrong
signature) is recorded in `failures` and asked again with the reason appended, a bounded number of
times; then `ProposalFailed` is raised so the loop logs it. Timeouts, rate limits, dropped
connections and 5xx answers back off exponentially with jitter (honouring Retry-After).

Tokens and cost are summed in `usage` (the loop reads it after each call and emits `LLMUsage`;
`last_usage` holds one call's share). API keys never leave the agent: `describe()` redacts them,
litellm's debug output is off, and every message the agent keeps or logs is scrubbed of them.

litellm is imported here only, when an agent is built (it takes seconds to import).
"""

from __future__ import annotations

import logging
import os
import random
import re
import threading
import time
import weakref
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Callable
from urllib.parse import urlsplit, urlunsplit

from ..errors import UserError
from .base import AgentContext, Idea
from .llm_answers import Rejected, parse_answer
from .prompts import RETRY_PROMPT, SYSTEM_PROMPT, build_prompt, current_tier

log = logging.getLogger("autokernel.agents.llm")
log.addHandler(logging.NullHandler())  # a library logs; the app decides where (never a bare stderr in the TUI)

REDACTED = "***"
# Environment variables whose values are secrets litellm may read (scrubbed like a key passed in).
_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.I)
# Loggers that may print a request (litellm's, and the HTTP clients it drives at DEBUG level).
_LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm", "openai", "openai._base_client",
                    "httpx", "httpcore.http11", "httpcore.connection")
_RETRYABLE_NAMES = ("Timeout", "RateLimitError", "APIConnectionError", "ServiceUnavailableError",
                    "InternalServerError", "BadGatewayError")
# How long one request may take before it counts as timed out (and is retried): long enough for a large
# model's whole answer; a local server, a CI run or a soak may want less (`--llm-timeout-s`, or this variable).
TIMEOUT_ENV = "AUTOKERNEL_LLM_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 300.0


class ProposalFailed(RuntimeError):
    """Every answer of one `propose` call was unusable (the reasons are in `agent.failures`)."""


class LLMUnavailable(RuntimeError):
    """The model could not be reached (retries exhausted, or an error retrying cannot fix)."""


@dataclass
class Failure:
    """One unusable answer (or part of one): why, an excerpt, and which attempt of which call."""

    reason: str
    excerpt: str
    attempt: int
    call: int


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0
    failed_calls: int = 0
    note: str = ""  # e.g. why cost is 0 (a local or unpriced model)

    def as_dict(self) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "cost_usd": self.cost_usd, "calls": self.calls, "failed_calls": self.failed_calls, "note": self.note}


class _Secret:
    """A key that prints as *** (so a repr, a log line or a dump of the agent never shows it)."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None):
        self._value = value or None

    def reveal(self) -> str | None:
        return self._value

    def __bool__(self) -> bool:
        return self._value is not None

    def __repr__(self) -> str:
        return REDACTED if self._value else "None"

    __str__ = __repr__


class _RedactFilter(logging.Filter):
    """Scrubs every live agent's secrets from the records of the loggers it is attached to (once)."""

    def __init__(self):
        super().__init__()
        self.agents: "weakref.WeakSet[LLMAgent]" = weakref.WeakSet()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True
        clean = message
        for agent in list(self.agents):
            clean = agent.redact(clean)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_FILTER = _RedactFilter()
for _name in (*_LITELLM_LOGGERS, log.name):
    logging.getLogger(_name).addFilter(_FILTER)


def redact_url(url: str | None) -> str | None:
    """An API base without user:password or query parameters (where keys sometimes ride)."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def parse_timeout(text: Any, what: str = TIMEOUT_ENV) -> float:
    """Seconds from `--llm-timeout-s` or the environment variable; a one-line UserError for anything else."""
    try:
        value = float(str(text).strip().lower().removesuffix("s"))
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise UserError(f"{what} must be a positive number of seconds, not {text!r}")
    return value


def llm_timeout_s() -> float:
    """The request timeout agents are built with: the environment's (set by `--llm-timeout-s`), else the default."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    return parse_timeout(text) if text else DEFAULT_TIMEOUT_S


def add_timeout_flag(p: Any) -> None:
    """`--llm-timeout-s` on a command that builds an LLM agent (optimize, kernelbench)."""
    p.add_argument("--llm-timeout-s", default=None, metavar="SECONDS",
                   help=f"how long one LLM request may take before it is retried (default {DEFAULT_TIMEOUT_S:g}, "
                        f"or ${TIMEOUT_ENV})")


def use_timeout_flag(args: Any) -> float:
    """Apply `--llm-timeout-s` (through the environment, which the session's agent and the TUI read) and check
    the environment's value, so that a bad one is the command's one-line error before anything runs."""
    given = getattr(args, "llm_timeout_s", None)
    if given is not None:
        os.environ[TIMEOUT_ENV] = repr(parse_timeout(given, "--llm-timeout-s"))
    return llm_timeout_s()


def _litellm():
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch at import
    import litellm

    litellm.suppress_debug_info = True
    litellm.turn_off_message_logging = True
    litellm.telemetry = False
    return litellm


class LLMAgent:
    """`propose(ctx) -> list[Idea]` from any litellm model (see the module docstring).

    `api_key=None` lets litellm read the provider's environment variable (OPENAI_API_KEY, ...).
    A local OpenAI-compatible server needs only `api_base` (a placeholder key is sent if none is set).
    `timeout_s=None` takes $AUTOKERNEL_LLM_TIMEOUT_S (what `--llm-timeout-s` sets), else DEFAULT_TIMEOUT_S.
    `backoff_s`, `max_backoff_s` and `sleep` set the waits between retries (tests make them short);
    `cancel()` ends a wait early.
    """

    whole_problems = True  # it can write a whole ModelNew for a problem with no known kernel type
    # In an optimize session, rows of no kernel type become subgraph targets that start from Inductor's seed,
    # which it rewrites (the prompt shows the seed and its measurement; engine/subgraph_targets.py).
    tunes_seeds = True

    def __init__(self, model: str, api_base: str | None = None, api_key: str | None = None, *,
                 temperature: float = 0.7, timeout_s: float | None = None, max_retries: int = 4,
                 max_tokens: int = 8192, fix_attempts: int = 2, backoff_s: float = 2.0,
                 max_backoff_s: float = 60.0, max_retry_after_s: float = 300.0,
                 sleep: Callable[[float], None] | None = None):
        model = (model or "").strip()
        if not model:
            raise UserError("--agent needs a model string, e.g. openai/gpt-4o or anthropic/claude-sonnet-4")
        timeout_s = llm_timeout_s() if timeout_s is None else timeout_s
        for name, value in (("timeout_s", timeout_s), ("max_tokens", max_tokens)):
            if value <= 0:
                raise UserError(f"LLM {name} must be positive, not {value}")
        if max_retries < 0 or fix_attempts < 0:
            raise UserError("LLM retries must be 0 or more")
        self.name = model
        self.model = model
        self.api_base = api_base or None
        self._api_key = _Secret(api_key)
        self.temperature = temperature
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.max_tokens = int(max_tokens)
        self.fix_attempts = int(fix_attempts)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.max_retry_after_s = float(max_retry_after_s)
        self._cancelled = threading.Event()
        self._sleep = sleep or self._cancelled.wait  # a wait that `cancel()` cuts short
        self.usage = Usage()
        self.last_usage = Usage()
        self.failures: list[Failure] = []
        self.last_failures: list[Failure] = []
        self.retries: list[tuple[str, float]] = []  # (what went wrong, seconds waited) per backoff
        # Called (on the loop's thread) with a redacted line per retry or re-ask, e.g. to emit a `Log` event.
        self.on_note: Callable[[str], None] | None = None
        self._calls = 0
        self._litellm = _litellm()
        _FILTER.agents.add(self)
        self._check_model()
        self.max_tokens = min(self.max_tokens, self._max_output_tokens() or self.max_tokens)

    def cancel(self) -> None:
        """Stop for good (from any thread, when the session stops): a backoff wait ends at once and this
        and every later `propose` raises `LLMUnavailable` instead of calling the model again."""
        self._cancelled.set()

    # -- what the store may keep ------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """The agent's settings for the store and the UI: never a key."""
        return {"agent": "llm", "model": self.model, "api_base": redact_url(self.api_base),
                "api_key": REDACTED if self._api_key else "from the environment",
                "temperature": self.temperature, "timeout_s": self.timeout_s, "max_retries": self.max_retries,
                "max_tokens": self.max_tokens, "fix_attempts": self.fix_attempts}

    config = property(describe)

    def __repr__(self) -> str:
        return f"LLMAgent({self.describe()!r})"

    def secrets(self) -> list[str]:
        """Every value this agent must never write: the key passed in, and secret-looking env values."""
        found = [self._api_key.reveal()] if self._api_key else []
        found += [v for k, v in os.environ.items() if _SECRET_ENV.search(k) and v and len(v) >= 8]
        if self.api_base:
            parts = urlsplit(self.api_base)
            found += [p for p in (parts.password, parts.query) if p and len(p) >= 4]
        return sorted(set(found), key=len, reverse=True)

    def redact(self, text: str) -> str:
        text = str(text)
        for secret in self.secrets():
            text = text.replace(secret, REDACTED)
        return text

    # -- proposing ----------------------------------------------------------------------------------
    def propose(self, ctx: AgentContext) -> list[Idea]:
        spec = _spec_of(ctx.kernel, ctx.problem)
        signature = getattr(spec, "signature", "") or _signature_of(spec)
        entry = getattr(spec, "entry", "kernel_fn")
        tier = current_tier(ctx.history)
        complete = None
        if ctx.seed_source:  # a subgraph target: the model writes kernels and ModelNew, the seed's problem goes in
            from ..subgraph_targets import complete_candidate

            complete = lambda code: complete_candidate(code, ctx.seed_source)  # noqa: E731
        known = [s for s in (ctx.parent_source, ctx.seed_source) if s]  # repeating either is no experiment
        messages = [{"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": build_prompt(ctx, spec)}]
        self._calls += 1
        self.last_failures = []
        before = Usage(**vars(self.usage))
        try:
            for attempt in range(self.fix_attempts + 1):
                text, finish = self._complete(messages)
                ideas, rejected = parse_answer(text, signature, ctx.backend, tier, ctx.max_ideas, ctx.max_variants,
                                               known_sources=known, entry=entry, complete=complete)
                for r in rejected:
                    self._fail(r, attempt)
                if ideas:
                    if rejected:  # the usable part goes on; the rest is recorded (and reaches the log)
                        self._note(f"{self.model}: {len(rejected)} part(s) of the answer rejected: "
                                   + "; ".join(r.reason for r in rejected))
                    return ideas
                reason = "; ".join(r.reason for r in rejected) or "nothing usable"
                if finish == "length":
                    reason += f" (the answer was cut off at {self.max_tokens} tokens: write less)"
                again = "; asking again" if attempt < self.fix_attempts else ""
                self._note(f"{self.model}: answer {attempt + 1} unusable ({reason}){again}")
                messages += [{"role": "assistant", "content": text or "(empty)"},
                             {"role": "user", "content": RETRY_PROMPT.format(reason=reason, signature=signature)}]
            raise ProposalFailed(self.redact(f"{self.fix_attempts + 1} answers of {self.model} had no usable kernel; "
                                             f"last: {self.last_failures[-1].reason if self.last_failures else '?'}"))
        finally:
            self.last_usage = Usage(
                prompt_tokens=self.usage.prompt_tokens - before.prompt_tokens,
                completion_tokens=self.usage.completion_tokens - before.completion_tokens,
                cost_usd=self.usage.cost_usd - before.cost_usd, calls=self.usage.calls - before.calls,
                failed_calls=self.usage.failed_calls - before.failed_calls, note=self.usage.note)

    def _note(self, message: str, level: int = logging.INFO) -> None:
        """A line for the person watching: to the logger, and to `on_note` if the loop set one."""
        message = self.redact(message)
        log.log(level, "%s", message)
        if self.on_note is not None:
            try:
                self.on_note(message)
            except Exception:  # a listener's failure must not cost the proposal
                log.exception("on_note failed")

    def _fail(self, rejected: Rejected, attempt: int) -> None:
        f = Failure(reason=self.redact(rejected.reason), excerpt=self.redact(rejected.excerpt), attempt=attempt,
                    call=self._calls)
        self.failures.append(f)
        self.last_failures.append(f)

    # -- one completion, with backoff ------------------------------------------------------------
    def _complete(self, messages: list[dict]) -> tuple[str, str]:
        """The answer's text and finish reason; retries what waiting can fix."""
        litellm = self._litellm
        for attempt in range(self.max_retries + 1):
            if self._cancelled.is_set():
                raise LLMUnavailable(f"{self.model}: cancelled (the session is stopping)")
            try:
                response = litellm.completion(
                    model=self.model, messages=messages, api_base=self.api_base, api_key=self._key(),
                    temperature=self.temperature, max_tokens=self.max_tokens, timeout=self.timeout_s,
                    max_retries=0, num_retries=0, drop_params=True)
            except Exception as e:  # litellm maps every provider's errors onto its own classes
                self.usage.failed_calls += 1
                what = self._describe_error(e)
                if not self._retryable(e):
                    raise LLMUnavailable(f"{self.model}: {what}") from None
                if attempt == self.max_retries:
                    raise LLMUnavailable(f"{self.model}: {what} (gave up after {attempt + 1} tries)") from None
                delay = self._delay(attempt, e)
                self.retries.append((what, delay))
                self._note(f"{what}; retrying in {delay:.1f} s", level=logging.WARNING)
                self._sleep(delay)
                if self._cancelled.is_set():
                    raise LLMUnavailable(f"{self.model}: cancelled while waiting to retry ({what})")
                continue
            self._count(response)
            choice = response.choices[0] if getattr(response, "choices", None) else None
            message = getattr(choice, "message", None)
            return (getattr(message, "content", None) or ""), (getattr(choice, "finish_reason", "") or "")
        raise AssertionError("unreachable")

    def _key(self) -> str | None:
        if self._api_key:
            return self._api_key.reveal()
        if self.api_base and not self._keys_in_environment():
            return "EMPTY"  # local OpenAI-compatible servers (vLLM, llama.cpp) accept any key
        return None

    def _keys_in_environment(self) -> bool:
        try:
            return bool(self._litellm.validate_environment(self.model).get("keys_in_environment"))
        except Exception:
            return False

    def _check_model(self) -> None:
        """A model string litellm cannot route, or no key for a hosted one, is the user's error."""
        try:
            self._litellm.get_llm_provider(self.model, api_base=self.api_base)
        except Exception:
            raise UserError(f"litellm does not know the model {self.model!r}: use provider/model, "
                            "e.g. openai/gpt-4o, anthropic/claude-sonnet-4 or openai/NAME with --api-base") from None
        if self._api_key or self.api_base:
            return
        try:
            env = self._litellm.validate_environment(self.model)
        except Exception:
            return
        if not env.get("keys_in_environment") and env.get("missing_keys"):
            raise UserError(f"no API key for {self.model}: set {', '.join(env['missing_keys'])}")

    def _max_output_tokens(self) -> int | None:
        """The model's own answer-length limit where litellm knows it (asking for more is a 400)."""
        try:
            return int(self._litellm.get_model_info(self.model).get("max_output_tokens") or 0) or None
        except Exception:
            return None

    def _retryable(self, e: Exception) -> bool:
        if any(type(e).__name__ == n or any(c.__name__ == n for c in type(e).__mro__) for n in _RETRYABLE_NAMES):
            return True
        status = getattr(e, "status_code", None)
        return isinstance(status, int) and (status >= 500 or status in (408, 409, 429))

    def _delay(self, attempt: int, e: Exception) -> float:
        """Exponential backoff with jitter; never less than the server's Retry-After (capped)."""
        base = min(self.max_backoff_s, self.backoff_s * (2 ** attempt))
        delay = base * (0.5 + random.random() / 2)
        after = retry_after_s(e)
        if after is not None:
            delay = max(delay, min(after, self.max_retry_after_s))
        return delay

    def _describe_error(self, e: Exception) -> str:
        status = getattr(e, "status_code", None)
        message = " ".join(str(getattr(e, "message", None) or e).split())
        if len(message) > 300:
            message = message[:297] + "..."
        return self.redact(f"{type(e).__name__}{f' ({status})' if status else ''}: {message}")

    def _count(self, response: Any) -> None:
        u = getattr(response, "usage", None)
        prompt = int(getattr(u, "prompt_tokens", 0) or 0)
        completion = int(getattr(u, "completion_tokens", 0) or 0)
        cost = 0.0
        try:
            cost = float(self._litellm.completion_cost(completion_response=response) or 0.0)
        except Exception:
            self.usage.note = f"{self.model} has no price in litellm: cost counted as 0"
        self.usage.prompt_tokens += prompt
        self.usage.completion_tokens += completion
        self.usage.cost_usd += cost
        self.usage.calls += 1


def retry_after_s(e: Exception) -> float | None:
    """Seconds the server asked to wait (Retry-After, retry-after-ms), if it said."""
    headers: Any = getattr(e, "litellm_response_headers", None)
    response = getattr(e, "response", None)
    if not headers and response is not None:
        headers = getattr(response, "headers", None)
    if not headers:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(float(ms) / 1000, 0.0)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(float(value), 0.0)
        except ValueError:
            return max(parsedate_to_datetime(value).timestamp() - time.time(), 0.0)
    except Exception:
        return None


def _spec_of(kernel: str, problem: str = "") -> Any:
    """The kernel type's spec, or the brief of a whole-problem target (its problem file)."""
    from ..problem_spec import PROBLEM_TARGET, problem_brief

    if kernel == PROBLEM_TARGET and problem:
        return problem_brief(problem)
    from autokernel.kernels import get_spec

    return get_spec(kernel)


def _signature_of(spec: Any) -> str:
    """`kernel_fn(...)` from the reference's parameters when a spec has no signature string."""
    import inspect

    reference = getattr(spec, "reference", None)
    if reference is None:
        raise ValueError(f"kernel spec {getattr(spec, 'name', '?')} has neither a signature nor a reference")
    return f"kernel_fn{inspect.signature(reference)}"
