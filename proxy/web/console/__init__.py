"""The console's static files (web/routes_console.py), installed as package data."""
