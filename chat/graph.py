"""The chat flow for one user message, wired as a LangGraph graph:

build_prompt → call_model → (tools ⇄ call_model) → (use_tool_answer) → save_turn → update_summary
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from chat.nodes import (
    build_prompt,
    call_model,
    route_after_model,
    route_after_tools,
    run_tools,
    save_turn,
    update_summary,
    use_tool_answer,
)
from chat.state import ChatState

builder = StateGraph(ChatState)
builder.add_node("build_prompt", build_prompt)
builder.add_node("call_model", call_model)
builder.add_node("tools", run_tools)
builder.add_node("use_tool_answer", use_tool_answer)
builder.add_node("save_turn", save_turn)
builder.add_node("update_summary", update_summary)

builder.add_edge(START, "build_prompt")
builder.add_edge("build_prompt", "call_model")
builder.add_conditional_edges("call_model", route_after_model, ["tools", "call_model", "save_turn"])
builder.add_conditional_edges("tools", route_after_tools, ["call_model", "use_tool_answer"])
builder.add_edge("use_tool_answer", "save_turn")
builder.add_edge("save_turn", "update_summary")
builder.add_edge("update_summary", END)

graph = builder.compile(name="ResolveAI chat")
