"""The Responses API's operations: create (`create.py`), stored responses (`stored.py`: retrieve,
delete, input items, replay), conversations (`conversations.py`), item references
(`references.py`), `/tokenize` for input_tokens and truncation (`tokenize.py`), compaction
(`compaction.py`), a WebSocket connection's memory (`localchains.py`), prompt templates
(`prompts.py`), what a request names that is fetched before translation: images, files, its
prompt (`inputs.py`)."""
