"""The chat flow for one user message, wired as a LangGraph graph:

build_prompt → call_model → (tools ⇄ call_model) → (use_tool_answer) → save_turn
build_prompt → research → save_turn  (research mode: rag/research.py)

The chat's summary is folded after the run, outside the graph (chat/summary.py, started by
chat/runner.py once the chat is released).
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from chat.nodes import (
    build_prompt,
    call_model,
    research,
    route_after_model,
    route_after_prompt,
    route_after_tools,
    run_tools,
    save_turn,
    use_tool_answer,
)
from chat.state import ChatState, Node, stoppable
from core.tracing import traced


def node(name: str, run: Node) -> Node:
    """A node that can be stopped with its turn (chat/state.py: a client gone, Stop), traced as a
    span of the message's trace."""
    return stoppable(traced(name)(run))


builder = StateGraph(ChatState)
builder.add_node("build_prompt", node("build_prompt", build_prompt))
builder.add_node("call_model", node("call_model", call_model))
builder.add_node("tools", node("tools", run_tools))
builder.add_node("use_tool_answer", node("use_tool_answer", use_tool_answer))
builder.add_node("research", node("research", research))
builder.add_node("save_turn", node("save_turn", save_turn))

builder.add_edge(START, "build_prompt")
builder.add_conditional_edges("build_prompt", route_after_prompt, ["call_model", "research"])
builder.add_edge("research", "save_turn")
builder.add_conditional_edges("call_model", route_after_model, ["tools", "call_model", "save_turn"])
builder.add_conditional_edges("tools", route_after_tools, ["call_model", "use_tool_answer"])
builder.add_edge("use_tool_answer", "save_turn")
builder.add_edge("save_turn", END)

graph = builder.compile(name="ResolveAI chat")
