"""The prompt texts: what they contain and that they stay stable enough to cache."""

from datetime import UTC, datetime

from core.prompts import WEB_NOTE, chat_instructions, user_turn


def test_instructions_carry_the_date_and_hour_and_stay_stable_within_the_hour() -> None:
    early = chat_instructions(datetime(2026, 11, 30, 7, 1, tzinfo=UTC), None)
    late = chat_instructions(datetime(2026, 11, 30, 7, 59, tzinfo=UTC), None)
    assert early == late
    assert "Monday, 30 November 2026, between 07:00 and 08:00 UTC" in early
    assert early != chat_instructions(datetime(2026, 11, 30, 8, 0, tzinfo=UTC), None)


def test_summary_is_tagged_after_the_instructions() -> None:
    text = chat_instructions(datetime(2026, 1, 1, tzinfo=UTC), "The user likes tea.")
    assert text.index("</instructions>") < text.index("<conversation_summary>")
    assert "<conversation_summary>\nThe user likes tea.\n</conversation_summary>" in text
    assert "<conversation_summary>" not in chat_instructions(datetime(2026, 1, 1, tzinfo=UTC), None)


def test_web_note_only_when_asked() -> None:
    assert user_turn("hi", use_web=False) == "hi"
    assert user_turn("hi", use_web=True).endswith(WEB_NOTE + "</note>")
