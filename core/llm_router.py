"""The one LiteLLM Router every model call goes through.

`models.yaml` (LiteLLM's `model_list` format) names a deployment group per role plus fallbacks.
Here we resolve keys from the settings, leave out deployments whose key is missing, let a role with
no deployment borrow its first remaining fallback, and register our one provider of our own,
`local` (`core.local_model.provider`). A deployment naming a provider that is neither LiteLLM's nor
registered is refused at start-up (the tests' scripted model is registered by the tests only).
Retries, fallbacks and timeouts are the Router's.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any

import litellm
import yaml
from litellm import Router

from core.config import Settings
from core.custom_provider import CustomProvider
from core.errors import StartupError
from core.stream_finalizer import drop_stream_finalizer

log = logging.getLogger("resolveai.models")

drop_stream_finalizer()  # every model call goes through this module's Router

ROLES = ("chat", "utility", "memory")
# A role missing from MODELS_CONFIG, with no fallback named for it, runs on this role's models.
BORROWS_FROM = {"memory": "utility"}
# What a deployment can do, from its `capabilities:` entry in models.yaml (our key, not LiteLLM's:
# it is taken off before the Router sees the deployment), else these defaults.
# tools: the chat model is offered tools at all (without them, memory works through recall and
# extraction around the model, and "Use web tool" searches the user's words directly).
# memory_tools: the chat model is offered save_memory/retrieve_memory (memory works without them:
# recall before the reply and extraction after it run around the model).
DEFAULT_CAPABILITIES = {"tools": True, "memory_tools": True}
ENV_PREFIX = "os.environ/"


@dataclass
class ModelPlan:
    """What the Router will be built from, after keys were checked."""

    model_list: list[dict[str, Any]]
    fallbacks: list[dict[str, list[str]]]
    router_settings: dict[str, Any] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)
    # Per LiteLLM model name (e.g. "local/qwen2.5-coder-1.5b-instruct"): its `capabilities:`.
    capabilities: dict[str, dict[str, Any]] = field(default_factory=dict)

    def deployments(self, group: str) -> list[str]:
        return [d["litellm_params"]["model"] for d in self.model_list if d["model_name"] == group]

    def fallbacks_of(self, group: str) -> list[str]:
        for entry in self.fallbacks:
            if group in entry:
                return entry[group]
        return []

    def capability(self, role: str, name: str) -> Any:
        """A capability of the role's first choice (see `DEFAULT_CAPABILITIES`)."""
        first = next(iter(self.deployments(role)), None)
        return self.capabilities.get(first or "", {}).get(name, DEFAULT_CAPABILITIES[name])

    def runs_locally(self, role: str) -> bool:
        """Whether the role's first choice is the local model (slow to read long prompts)."""
        return any(m.startswith("local/") for m in self.deployments(role)[:1])

    def describe(self, role: str) -> str:
        """E.g. 'groq/openai/gpt-oss-120b, then openrouter/openai/gpt-oss-120b, then local/…'."""
        chain = self.deployments(role)
        for group in self.fallbacks_of(role):
            chain += [m for m in self.deployments(group) if m not in chain]
        return ", then ".join(chain)


def plan_models(settings: Settings) -> ModelPlan:
    """Read MODELS_CONFIG and decide which deployments and fallbacks are usable."""
    try:
        config = yaml.safe_load(settings.models_config.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as error:
        raise StartupError(
            f"Invalid setting MODELS_CONFIG = {str(settings.models_config)!r}: {error}"
        ) from None
    router_settings = dict(config.get("router_settings") or {})
    raw_fallbacks = router_settings.pop("fallbacks", None) or config.get("fallbacks") or []

    model_list, left_out, capabilities = [], [], {}
    for entry in config.get("model_list") or []:
        deployment = {k: v for k, v in entry.items() if k != "capabilities"}
        params = copy.deepcopy(deployment["litellm_params"])
        _check_provider(params["model"], settings)
        missing = _resolve_keys(params, settings)
        if missing:
            left_out.append(f"{params['model']} (no {', '.join(missing)})")
            continue
        if _is_ours(params["model"]):
            # Free, so declared free: LiteLLM otherwise looks for prices it has not got after
            # every call, a few ms of CPU each on the keyless default (bench/RESULTS.md).
            deployment["model_info"] = {**_FREE, **(deployment.get("model_info") or {})}
        model_list.append({**deployment, "litellm_params": params})
        capabilities[params["model"]] = dict(entry.get("capabilities") or {})

    available = {d["model_name"] for d in model_list}
    fallbacks = []
    for entry in raw_fallbacks:
        for group, targets in entry.items():
            usable = [t for t in targets if t in available]
            if usable:
                fallbacks.append({group: usable})
    plan = ModelPlan(model_list, fallbacks, router_settings, left_out, capabilities)

    for role in ROLES:
        if role in available:
            continue
        substitute = next(iter(plan.fallbacks_of(role)), None)
        if substitute is None and role in BORROWS_FROM:
            # A config written before the role existed: it runs as the role it grew out of.
            source = BORROWS_FROM[role]
            plan.model_list += [
                {**copy.deepcopy(d), "model_name": role}
                for d in plan.model_list
                if d["model_name"] == source
            ]
            if plan.fallbacks_of(source):
                plan.fallbacks.append({role: plan.fallbacks_of(source)})
            continue
        if substitute is None:
            raise StartupError(
                f"No model can serve the '{role}' role: check MODELS_CONFIG "
                f"({settings.models_config}) and the provider keys"
            )
        # The role borrows its first fallback's deployments, and keeps the rest of the chain.
        plan.model_list += [
            {**copy.deepcopy(d), "model_name": role}
            for d in model_list
            if d["model_name"] == substitute
        ]
        rest = plan.fallbacks_of(role)[1:]
        plan.fallbacks = [e for e in plan.fallbacks if role not in e]
        if rest:
            plan.fallbacks.append({role: rest})
    return plan


_FREE = {"input_cost_per_token": 0.0, "output_cost_per_token": 0.0}


def _is_ours(model: str) -> bool:
    """Whether `model` runs on a provider of ours (the bundled local model, a test's script)."""
    provider = model.split("/", 1)[0]
    return provider == "local" or provider_handler(provider) is not None


def _check_provider(model: str, settings: Settings) -> None:
    provider = model.split("/", 1)[0]
    if provider not in litellm.provider_list and not _is_ours(model):
        raise StartupError(
            f"Unknown model provider {provider!r} in MODELS_CONFIG ({settings.models_config}): "
            "use one of LiteLLM's providers (openai/, groq/, gemini/, ollama/, …) or local/"
        )


def _resolve_keys(params: dict[str, Any], settings: Settings) -> list[str]:
    """Replace `os.environ/NAME` values with the setting's value; return names that are unset."""
    missing = []
    for name, value in params.items():
        if isinstance(value, str) and value.startswith(ENV_PREFIX):
            env_name = value.removeprefix(ENV_PREFIX)
            resolved = settings.secret(env_name)
            if resolved is None:
                missing.append(env_name)
            else:
                params[name] = resolved
    return missing


def register_provider(name: str, handler: CustomProvider) -> None:
    """Make `name/<model>` route to a provider of ours (replacing an earlier registration)."""
    litellm.custom_provider_map = [
        item for item in litellm.custom_provider_map if item["provider"] != name
    ] + [{"provider": name, "custom_handler": handler}]


def build_router(settings: Settings, plan: ModelPlan | None = None) -> Router:
    """The Router for `plan` (or the settings' plan), with the local model's client registered."""
    plan = plan or plan_models(settings)
    used = {d["litellm_params"]["model"].split("/", 1)[0] for d in plan.model_list}
    if "local" in used:
        from core.local_model.provider import LocalModelProvider

        previous = provider_handler("local")
        if isinstance(previous, LocalModelProvider):
            previous.close()
        register_provider("local", LocalModelProvider(settings))
    # One deadline for every model call (MODEL_CALL_DEADLINE) unless the file sets its own; the
    # local model's client enforces it too (LiteLLM's timeout does not reach our provider).
    router_settings = {"timeout": settings.model_call_deadline, **plan.router_settings}
    return Router(model_list=plan.model_list, fallbacks=plan.fallbacks, **router_settings)


def provider_handler(name: str) -> CustomProvider | None:
    """The registered provider of ours called `name`, if any (tests script it through this)."""
    for item in litellm.custom_provider_map:
        if item["provider"] == name:
            return item["custom_handler"]  # type: ignore[return-value]
    return None


def log_model_plan(plan: ModelPlan) -> None:
    for entry in plan.left_out:
        log.info("Models: left out %s", entry)
    for role in ROLES:
        log.info("%s model: %s", role.capitalize(), plan.describe(role))
