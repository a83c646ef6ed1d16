"""The synthetic multi-document task: variable bindings that later documents update.

A prompt is BOS, then 4-6 documents, then a query:

    BOS | DOC w w X = v ; w w w Y = u ; ... | DOC ... X = v' ; ... | ... | QRY X =   -> v'

* Each document is one cacheable segment of 48-64 tokens: the DOC marker, filler words, and
  3-5 assignments `VAR = VAL ;` at random places.
* The documents draw their variables from a small active set of the prompt (8 of the 24), so
  most variables are assigned in several documents, usually to different values.
* The query asks for the value a variable holds at the end of the documents: the value of its
  LAST assignment. With probability `p_updated` (0.85) the queried variable is one whose value
  was changed by a later document than its first assignment.

Why the linear layers must carry it across segments: the answer is the latest binding of a key
that several documents bind. A Gated DeltaNet head stores it as k_X v^T and the delta rule of
each later assignment overwrites it; across a segment boundary that overwrite is exactly
T_C = prod exp(g)(I - beta k k^T) applied to the earlier documents' state. Naive addition of the
documents' zero-init states leaves every document's binding of X superposed (and undecayed), so
the read-out holds the stale values too. Attention alone would have to pick the most recent of
several equal-key matches, which nothing in the task makes easy for it.

Token ids (vocab 128): 0 PAD, 1 BOS, 2 DOC, 3 '=', 4 ';', 5 QRY, 8-31 variables, 32-63 values,
64-127 filler words.

Every draw comes from a `random.Random` seeded by the caller, so data sets are reproducible.
"""

import json
import random

PAD, BOS, DOC, EQ, SEP, QRY = 0, 1, 2, 3, 4, 5
VARS = list(range(8, 32))
VALS = list(range(32, 64))
WORDS = list(range(64, 128))
VOCAB = 128


def make_document(rng, variables, length):
    """One document of exactly `length` tokens: DOC, filler and assignments of `variables`.

    Returns (tokens, [(var, val, pos_of_val), ...]) in document order.
    """
    n_assign = len(variables)
    filler = length - 1 - 4 * n_assign
    # Split the filler into n_assign + 1 gaps at random.
    cuts = sorted(rng.randint(0, filler) for _ in range(n_assign))
    gaps = [b - a for a, b in zip([0] + cuts, cuts + [filler])]
    tokens, bindings = [DOC], []
    for i, var in enumerate(variables):
        tokens += [rng.choice(WORDS) for _ in range(gaps[i])]
        val = rng.choice(VALS)
        bindings.append((var, val, len(tokens) + 2))
        tokens += [var, EQ, val, SEP]
    tokens += [rng.choice(WORDS) for _ in range(gaps[-1])]
    assert len(tokens) == length
    return tokens, bindings


def make_documents(rng, n_docs=None, active=8):
    """The documents of one prompt and the bindings of each, in order."""
    n_docs = n_docs or rng.randint(4, 6)
    pool = rng.sample(VARS, active)
    docs = []
    for _ in range(n_docs):
        length = rng.randint(48, 64)
        n_assign = rng.randint(3, 5)
        docs.append(make_document(rng, rng.sample(pool, n_assign), length))
    return docs


def latest(docs):
    """{var: (val, segment, pos)} of each variable's last assignment, and the set of variables
    updated by a later document: last value unlike the first, and in another document."""
    first, last = {}, {}
    for si, (_, bindings) in enumerate(docs):
        for var, val, pos in bindings:
            first.setdefault(var, (val, si))
            last[var] = (val, si, pos)
    updated = {v for v in last if last[v][0] != first[v][0] and last[v][1] != first[v][1]}
    return last, updated


def choose_query(rng, docs, p_updated=0.85, exclude=()):
    """A queried variable (and its answer record), updated with probability p_updated."""
    last, updated = latest(docs)
    upd = [v for v in sorted(updated) if v not in exclude]
    rest = [v for v in sorted(last) if v not in updated and v not in exclude]
    if upd and (not rest or rng.random() < p_updated):
        var = rng.choice(upd)
    elif rest:
        var = rng.choice(rest)
    else:
        return None
    return var, last[var], var in updated


def make_prompt(rng, p_updated=0.85):
    """One evaluation prompt in the JSONL schema of issue 19 (plus `updated`)."""
    docs = make_documents(rng)
    var, (val, seg, pos), upd = choose_query(rng, docs, p_updated)
    return {"prefix": [BOS], "segments": [d for d, _ in docs], "suffix": [QRY, var, EQ],
            "answer": [val], "evidence_segment": seg, "evidence_pos": pos, "updated": upd}


def make_training_sequence(rng, n_queries=8, p_updated=0.85):
    """BOS + documents + up to n_queries `QRY X = v` triples, and the positions whose next
    token is an answer (the `=` of each query), with those answers."""
    docs = make_documents(rng)
    seq = [BOS]
    for d, _ in docs:
        seq += d
    targets, asked = [], set()
    for _ in range(n_queries):
        q = choose_query(rng, docs, p_updated, exclude=asked)
        if q is None:
            break
        var, (val, _, _), _ = q
        asked.add(var)
        seq += [QRY, var, EQ]
        targets.append((len(seq) - 1, val))
        seq.append(val)
    return seq, targets


def write_eval_set(path, n, seed):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            f.write(json.dumps(make_prompt(rng), separators=(",", ":")) + "\n")


def read_jsonl(path, limit=None):
    out = []
    with open(path) as f:
        for line in f:
            if line.strip():
                out.append(json.loads(line))
            if limit and len(out) >= limit:
                break
    return out
