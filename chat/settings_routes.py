"""`GET /api/settings/system`: what this server runs on, for the Settings page to show read-only
(it comes from the environment, not from the user): the model serving each role and whether it
is the local fallback, the database (embedded or external, never its credentials), the embedder,
web search and tracing, and each tool with whether the model can be offered it here. The user's
own settings are `GET/PATCH /api/settings` (chat/memory_routes.py)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from chat.tools import MEMORY_TOOLS, SUMMARIES, TOOLS
from core.llm_router import ROLES
from core.local_model.weights import MODEL_LABEL
from core.services import Services

router = APIRouter(prefix="/api")


@router.get("/settings/system")
async def system_settings(request: Request) -> dict[str, Any]:
    services: Services = request.app.state.services
    settings = services.settings
    return {
        "models": [_role(services, role) for role in ROLES],
        # Deployments of MODELS_CONFIG left out, each with the key it lacks.
        "left_out": list(services.model_plan.left_out),
        "database": {
            "kind": "embedded" if services.database.embedded else "external",
            "description": services.database.description,  # host:port/db at most: no user
        },
        "embedder": {"model": services.embedder.model_name, "state": services.embedder.state},
        "web_search": {
            "available": services.search_provider is not None,
            "status": services.features.get("web_search", "off"),
        },
        "tracing": {
            "on": settings.langfuse_enabled,
            "status": services.features.get("tracing", "off"),
        },
        "chat_model_tools": bool(services.model_plan.capability("chat", "tools")),
        "tools": [_tool(services, tool.name) for tool in TOOLS],
    }


def _role(services: Services, role: str) -> dict[str, Any]:
    plan = services.model_plan
    first = next(iter(plan.deployments(role)), "")
    local = plan.runs_locally(role)
    path = services.settings.local_model_path
    return {
        "role": role,
        "model": first,
        "label": (path.stem if path else MODEL_LABEL) if local else first.split("/", 1)[-1],
        "runs_locally": local,
        # The local model stands in because the hosted ones lack their keys.
        "fallback": local and bool(plan.left_out),
        "chain": plan.describe(role),
    }


def _tool(services: Services, name: str) -> dict[str, Any]:
    """A tool and why the model is never offered it on this server, if it is not."""
    plan = services.model_plan
    reason = None
    if name == "fetch_url":  # links in a message are read on every model, tools or not
        if not services.settings.reads_links:
            reason = "reading links is off on this server (LINK_READING)"
    elif name == "calculator":
        pass  # a model without tools gets the calculator's result with the message (arithmetic.py)
    elif not plan.capability("chat", "tools"):
        reason = "the chat model on this server is not offered tools (the local model)"
    elif name in MEMORY_TOOLS and not plan.capability("chat", "memory_tools"):
        reason = "the chat model here does not get the memory tools (memory works without them)"
    elif name == "web_search" and services.search_provider is None:
        reason = f"web search is {services.features.get('web_search', 'off')}"
    return {"name": name, "description": SUMMARIES[name], "available": reason is None,
            "reason": reason}  # fmt: skip
