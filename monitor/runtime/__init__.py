"""The process around the core: narrow ports, the step engines, failpoints."""
