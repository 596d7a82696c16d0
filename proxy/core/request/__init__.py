"""What a client sends, validated: the Responses create body (`create.py`), its input items
(`items.py`), tools and `tool_choice` (`tools.py`), `item_reference`s (`references.py`), what a
request may expand to (`expansion.py`), lenient/strict tolerance (`tolerance.py`), list paging
(`paging.py`), and the readers every room uses: typed fields naming the parameter
(`fields.py`), a body's JSON (`jsonbody.py`). The concepts that span parsing, translation and
events alike stay outside: `compaction.py`, `mcp.py`, and core/tools/."""
