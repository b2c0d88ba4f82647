"""Views: pure consumers of a Record and its findings (text, HTML, JSON). No probing here."""
