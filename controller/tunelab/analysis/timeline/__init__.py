"""Reading an attempt's timeline (the document ``tunelab.bench.timeline.document`` describes):
a typed view (:mod:`.model`), its windows as within-launch blocks (:mod:`.blocks`), named
events with evidence (:mod:`.events`), and the report's aligned panels (:mod:`.panels`). Pure:
no store, no network."""
