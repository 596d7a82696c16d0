"""A Responses request turned into a chat-completions request (`chat.py`): one leading system
message (`system_prompt.py`), what `truncation: "auto"` drops and how the fleet says a prompt is
too long (`truncation.py`); and the other way in, a client's own chat request read as vLLM's
chat parser reads it (`chatparts.py`)."""
