"""Responses stream events: how upstream chunks become them (`assembler/`)."""
