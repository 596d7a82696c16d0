"""A Responses request turned into a chat-completions request (`chat.py`): one leading system
message (`system_prompt.py`), what `truncation: "auto"` drops and how the fleet says a prompt is
too long (`truncation.py`)."""
