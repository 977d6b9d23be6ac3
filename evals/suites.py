"""The eval suites by name, in the order RESULTS.md lists them: module and one-line description
(a suite's module is imported only when it runs)."""

SUITES: dict[str, tuple[str, str]] = {
    "memory-retrieval": (
        "evals.memory_retrieval",
        "retrieve_memory's recall of LoCoMo evidence turns, against a BM25 baseline",
    ),
    "evidence-ranking": (
        "evals.evidence_ranking",
        "where the chunk holding a SQuAD answer lands in a search round's ranking",
    ),
    "documents-qa": (
        "evals.documents_qa",
        "the SQuAD pages uploaded as documents (Markdown, PDF): where each answer's passage ranks",
    ),
    "documents-answers": (
        "evals.documents_answers",
        "SQuAD questions answered from the pages uploaded as documents: correct, cited",
    ),
    "evidence-check": (
        "evals.evidence_check",
        "the utility model's 'enough evidence?' verdict on answerable and unanswerable questions",
    ),
    "memory-extraction": (
        "evals.memory_extraction",
        "replay LoCoMo turns as user messages, then extraction: grounding, coverage, latency",
    ),
    "memory-statements": (
        "evals.memory_statements",
        "one-sentence statements about the user, and requests: what extraction keeps from each",
    ),
    "chat-replies": (
        "evals.chat_replies",
        "first-person statements as a new chat's first message: refusals, markup, time",
    ),
    "memory-heed": (
        "evals.memory_heed",
        "requests after the user told a diet or an allergy: does the reply keep to it",
    ),
    "arithmetic": (
        "evals.arithmetic",
        "sums and word problems as first messages: the exact result, with the calculator or not",
    ),
    "memory-qa": (
        "evals.memory_qa",
        "replay a LoCoMo conversation through the chat graph, then ask its questions in a new chat",
    ),
    "web-answers": (
        "evals.web_answers",
        "SQuAD questions through the web_search tool: correctness, citations, 'I couldn't find'",
    ),
    "research": (
        "evals.research",
        "multi-part SQuAD questions in research mode against the normal web answer",
    ),
}
