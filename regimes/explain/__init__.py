"""Explanations of detected anomalies: phases, memory, backends, boundary alignment."""
