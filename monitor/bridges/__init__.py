"""Audit-queue bridges: processes between the request/label topics and a labeling tool.

A bridge reads the daemon's label requests, puts them where people label (``labelstudio``:
Label Studio), and publishes the answers to the label topic in the schema the daemon reads
(README "Messages"). It never imports the daemon's estimator: it talks to Kafka and the tool.
"""
