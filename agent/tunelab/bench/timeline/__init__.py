"""One time axis per attempt (DESIGN.md, "Timeline"): the document's format and its bounds
(:mod:`.document`), and the load generator's own series (:mod:`.client`). The agent adds the
engine, GPU and host series on the same clock; the controller's ``tunelab.analysis.timeline``
reads it for events and blocks."""
