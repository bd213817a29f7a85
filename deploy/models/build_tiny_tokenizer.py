"""Rebuild the tiny model's tokenizer from code: ``python deploy/models/build_tiny_tokenizer.py``.

Nothing is downloaded: the tokenizer of ``tiny-llama/`` is
trained here, deterministically, on the small corpus below: byte-level BPE (any text
encodes, nothing is unknown), at most 1024 ids to match the model's ``vocab_size``.

Special tokens and ids (``config.json`` says pad 0, bos 1, eos 2):
``<pad>`` 0, ``<s>`` 1, ``</s>`` 2, ``<|system|>`` 3, ``<|user|>`` 4, ``<|assistant|>`` 5,
``<|tool|>`` 6, ``<|end|>`` 7.

The chat template is *boundary-safe*: every message is ``<|role|>content<|end|>`` and
ends with a special token, and nothing follows ``<|end|>`` outside a message. The
tokenizer splits on special tokens before BPE, so rendering a conversation yields the
tokens of its first messages rendered alone, followed by the rest. That is what lets a
team's shared context (a system message) be a HOT prefix of every agent's prompt.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

HERE = Path(__file__).resolve().parent
MODEL_DIR = HERE / "tiny-llama"
VOCAB_SIZE = 1024
SPECIALS = ["<pad>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>",
            "<|end|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['content'] is string %}{% set content = message['content'] %}"
    "{% else %}{% set content = message['content'] | map(attribute='text') | join('') %}"
    "{% endif %}"
    "{{ '<|' + message['role'] + '|>' + content + '<|end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)

CORPUS = """
A team of agents shares one long context: the instructions, the tools, the documents.
Every agent of the team reads the same shared context, then adds its own short turns.
The shared context is stored once, in a contiguous region of the key-value cache that we
call the HOT pool. The turns of each agent live in the COLD pool, one token per page.
At each decoding step, the attention of all the agents of a team reads the shared prefix
in one dense pass, and the private suffix of each agent in a paged pass; the two partial
results are merged by their log-sum-exp. A dispatcher chooses the faster backend for the
current regime: cascade attention when many agents share a long prefix, a unified paged
kernel when the batch is small or the prefix is short.
The platform serves the engine over HTTP. A client registers a prefix, receives its
identifier, its length in tokens and where it is pinned, and then binds its requests to
it. Teams are isolated: a team can neither read nor use nor delete the prefix of another
team. Replicas may restart; the registry outside the replicas pins the prefixes again.
Reviewers read the document and write their findings. The synthesizer joins the
findings into one report. In a debate, two agents argue for several rounds and a judge
decides. A planner splits the work into steps and executors carry them out in parallel.
The quick brown fox jumps over the lazy dog. Numbers: 0 1 2 3 4 5 6 7 8 9 10 16 32 64
128 256 512 1024 2048 4096 8192 16384. Questions and answers: what is the status of the
request? It is running. How many tokens were generated? Sixteen. Which team owns this
prefix? The red team. The blue team reviews the code, the green team writes the tests.
def register(team, tokens): return registry.register(team, tokens, pin=True)
{"prefix_id": "red-context", "length": 512, "state": "ready", "pinned": true}
Security matters: requests carry the key of their team, bodies are validated, limits
are enforced, and errors are clear. Metrics report usage of the pools, hits and misses,
the choices of the dispatcher, the throughput in tokens per second and the queue depth.
Summarize the findings. List the risks. Propose a plan. Explain the decision. Answer
briefly and precisely. Thank you; you are welcome. Yes, no, maybe, always, never.
Operators deploy the application with a configuration file; the cluster schedules
replicas on machines with accelerators, and a placement group packs the workers of one
tensor-parallel engine together. Health checks ask the engine whether it answers; a
graceful shutdown drains the requests in flight before the process exits.
Weather report: cloudy morning, sunny afternoon, light wind from the west, temperature
between twelve and nineteen degrees. Recipe: chop onions, garlic and tomatoes; simmer
with olive oil, salt, pepper and basil; serve with bread. History, geography, physics,
chemistry, biology, mathematics, literature, music, painting, architecture, economics.
Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April
May June July August September October November December spring summer autumn winter.
"""


def build(vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=1, special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([line for line in CORPUS.splitlines() if line], trainer)
    # Completions (add_special_tokens=True) start with BOS, as Llama's do; chat prompts
    # get theirs from the template, vLLM tokenizes them without special tokens.
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    # Every id the model can emit must decode: the vocabulary fills vocab_size exactly.
    assert tok.get_vocab_size() == vocab_size, tok.get_vocab_size()
    return tok


def tokenizer_config() -> dict[str, object]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": None,
        "additional_special_tokens": SPECIALS[3:],
        "model_max_length": 4096, "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }


def generation_config() -> dict[str, object]:
    # `<|end|>` closes an assistant message: stop there as well as at EOS.
    return {"bos_token_id": 1, "eos_token_id": [2, SPECIALS.index("<|end|>")],
            "pad_token_id": 0}


def save(out: Path = MODEL_DIR) -> None:
    out.mkdir(parents=True, exist_ok=True)
    build().save(str(out / "tokenizer.json"))
    for name, data in (("tokenizer_config.json", tokenizer_config()),
                       ("special_tokens_map.json", {"bos_token": "<s>", "eos_token": "</s>",
                                                    "pad_token": "<pad>"}),
                       ("generation_config.json", generation_config())):
        (out / name).write_text(json.dumps(data, indent=2) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=MODEL_DIR)
    save(ap.parse_args().out)


if __name__ == "__main__":
    main()
