"""What a client sends, validated: the Responses create body (`create.py`), its input items
(`items.py`), tools and `tool_choice` (`tools.py`), `item_reference`s (`references.py`), what a
request may expand to (`expansion.py`), lenient/strict tolerance (`tolerance.py`), list paging
(`paging.py`). The field and JSON helpers every room uses stay in core/ (`fields.py`,
`jsonbody.py`), as do the concepts that span parsing, translation and events alike
(`compaction.py`, `mcp.py`, `toolnames.py`, `custominput.py`)."""
