"""The tunelab controller (durable experiment queue) and the laptop CLI ``tunelab``."""
