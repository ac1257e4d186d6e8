"""A streamer for transformers' generate that stamps the time of each put(): the first put is the
prompt (or the batch's prompts), each later one a step's new tokens (one per sequence). Shared by
model_peer.py and batch_peer.py, which time decode from the first new token to the last."""
import time


class Stamps:
    def __init__(self):
        self.calls = []

    def put(self, value):
        self.calls.append(time.perf_counter())

    def end(self):
        pass

    def steps(self):
        """The new tokens' stamps (the prompt's put left out)."""
        return self.calls[1:]
