"""The console's static files (web/routes/console.py), installed as package data."""
