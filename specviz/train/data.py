"""Training data without a data set (docs/drafters.md): the target writes its own prompts and answers them.

1. Prompts, Magpie-style (Xu et al. 2024): the chat template up to the user turn's header, optionally followed
   by a few opening words that this module writes (to spread topics: code, maths, chat, summaries, lists,
   translation, ...), then the target samples the rest of the user turn until it closes it.
2. Answers: the target answers each prompt through the same chat template the engine uses (greedy, the
   decoding the drafters are measured on, plus a share sampled for variety). Self-distillation: the drafter
   learns exactly the distribution it must predict (EAGLE and Medusa-2 train on the target's own outputs).
3. Long contexts: some answers become documents inside new prompts (summarise, answer from the text,
   translate), so that the drafter also sees long prompts whose words come back in the answer.
4. German: the target translates some answers into German (its German is poor, but German-looking), and
   those texts come back as German-to-English requests, whose answers quote and translate them.

Spec-Bench is never read here: it is for evaluation only.
"""
from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..models.loading import LoadedModel
from ..runners.causal import _cache_keyword, new_cache
from ..rule.sampling import warp_probs
from ..settings import DecodeSettings

# Opening words of user turns, written for this project; the target completes each one (Magpie).
STARTERS = [
    "Write a Python function that", "Write a JavaScript function to", "Write a SQL query that", "Fix this code:",
    "Explain what this code does:", "How do I", "Write a program that", "Implement a class",
    "Solve for x:", "What is the sum of", "A train travels", "Calculate", "If a shop sells", "Prove that",
    "What is the probability", "How many", "Find the area of",
    "Write a short story about", "Write a poem about", "Compose an email to", "Write a blog post about",
    "Draft a cover letter for", "Write a product description for", "Write a speech about",
    "Pretend you are", "Imagine you are", "Act as a", "You are a tour guide.",
    "Summarize the following", "Give me a summary of", "Summarize:", "What are the main points of",
    "List five", "Give me a list of", "What are some tips for", "Name three", "List the steps to",
    "Translate the following sentence into French:", "Translate into German:", "Translate into Spanish:",
    "How do you say", "Translate German to English:",
    "What is", "Who was", "Why do", "When did", "Where is", "Explain", "Describe", "Compare",
    "What is the difference between", "Can you explain how", "Tell me about", "What causes",
    "Extract the names from", "Classify the following", "Rate the following reviews", "Convert this list",
    "In physics,", "In biology,", "In economics,", "In history,", "What are the benefits of", "How does",
    "Give me advice on", "I feel", "Can you help me", "What should I", "Hi!", "Thanks! Now",
    # more kinds of request, so the drafter sees more than one style of answer
    "Write a travel blog post about", "Write a persuasive essay on", "Write a dialogue between",
    "Write a limerick about", "Write a letter to", "Describe a day in the life of", "Write a news report about",
    "As a detective,", "Role-play as", "You are a chef.", "Pretend to be a pirate and",
    "Answer the riddle:", "If all cats are animals,", "Which is heavier,", "What comes next in the sequence",
    "A farmer has", "Tom has 5 apples", "What is 15% of", "Simplify the expression", "Solve the equation",
    "Convert 100 degrees Fahrenheit", "Write a bash script that", "Write a C++ program", "Write a regular expression",
    "Explain the time complexity of", "Debug this Python code:", "Write unit tests for",
    "Return a JSON object with", "From the text below, extract", "Parse the following data",
    "Explain to a child", "What is the role of", "How did the Industrial Revolution", "Discuss the causes of",
    "What are the ethical issues of", "Analyze the poem", "What is the capital of", "Who invented", "How far is",
    "Answer in one sentence:", "Answer briefly:", "Give three reasons why", "Rewrite this sentence more formally:",
    "Correct the grammar:", "Paraphrase:", "Write a haiku about", "Outline a plan to",
]
STARTER_SHARE = 0.75  # the rest are pure Magpie: nothing after the user header

LONG_TEMPLATES = [
    "Summarize: {doc}",
    "Summarize the following text in a few sentences.\n\n{doc}",
    "{doc}\n\nWhat are the main points of the text above?",
    "Read the text below and answer the question.\n\n{doc}\n\nQuestion: {question}",
    "{doc}\n\nBased on the passage above, {question}",
    "Rewrite the following text in simpler words:\n{doc}",
    "Extract the key facts from this text as a list:\n{doc}",
    "Translate German to English: {doc}",
]
TO_GERMAN = ["Translate into German: {doc}", "Translate the following text into German.\n\n{doc}",
             "Please translate this into German:\n{doc}"]
FROM_GERMAN = ["Translate German to English: {doc}", "Translate the following German text into English:\n{doc}",
               "What does this German text say in English?\n\n{doc}", "Translate from German: {doc}"]


@dataclass
class DataPlan:
    prompts: int = 8000  # Magpie prompts asked for (duplicates and unfinished ones are dropped)
    prompt_tokens: int = 64  # the longest user turn sampled
    response_tokens: int = 384  # the longest answer
    long_share: float = 0.25  # extra long-context prompts, as a share of the answered ones
    sampled_share: float = 0.2  # answers sampled (temperature 0.7) rather than greedy
    german_share: float = 0.0  # answers translated into German and back, as a share of the answered ones
    batch_size: int = 256
    minutes: float | None = None  # stop answering new batches after this long (the prompts made so far stay)
    extra_minutes: float = 0.5  # each later round (long contexts; German) may go on this long after `minutes`
    seed: int = 0


def _header_ids(target: LoadedModel) -> list[int]:
    """The chat template up to the start of the user's text (system prompt included, as the engine sends it)."""
    marker = "\u2063MAGPIE\u2063"
    text = target.tokenizer.apply_chat_template([{"role": "user", "content": marker}], tokenize=False)
    prefix = text[: text.index(marker)]
    return target.tokenizer.encode(prefix, add_special_tokens=False)


@torch.inference_mode()
def continue_batch(target: LoadedModel, prompts: list[list[int]], max_new: int, settings: DecodeSettings,
                   generator: torch.Generator, stop_id: int) -> list[list[int]]:
    """Continue each prompt (left-padded batch, KV cache) until stop_id or max_new tokens; returns the new ids,
    stop_id included when reached."""
    model, device = target.model, target.device
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), stop_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, width - len(p):] = torch.tensor(p)
        mask[row, width - len(p):] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    cache = new_cache()
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    keyword = _cache_keyword(model)
    hidden = decoder(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                     **{keyword: cache}).last_hidden_state[:, -1]
    finished = torch.zeros(len(prompts), dtype=torch.bool, device=device)
    new = []
    for _ in range(max_new):
        logits = head(hidden).float()
        if settings.greedy:
            token = logits.argmax(-1)
        else:
            token = torch.multinomial(warp_probs(logits, settings), 1, generator=generator).squeeze(-1)
        token = torch.where(finished, torch.full_like(token, stop_id), token)
        new.append(token)
        finished |= token == stop_id
        if bool(finished.all()):
            break
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        positions = positions[:, -1:] + 1
        hidden = decoder(input_ids=token.unsqueeze(1), attention_mask=mask, position_ids=positions, use_cache=True,
                         **{keyword: cache}).last_hidden_state[:, -1]
    rows = torch.stack(new, dim=1).tolist() if new else [[] for _ in prompts]
    out = []
    for row in rows:
        out.append(row[: row.index(stop_id) + 1] if stop_id in row else row)
    return out


def _batches(items: list, size: int):
    for start in range(0, len(items), size):
        yield items[start: start + size]


def opener_ids(tokenizer, opener: str) -> list[int]:
    """The opening words of a user turn, ending on the last word. Not on a space: this tokenizer joins a space
    to the word after it (" poem"), so a lone space token is where a number begins, and the target went on
    with digits after 94 of the 117 starters ("Who was 35058347?", "Outline a plan to 2019 in the UK.")."""
    return tokenizer.encode(opener, add_special_tokens=False) if opener else []


def magpie_prompts(target: LoadedModel, plan: DataPlan, rng: random.Random, generator, progress=None) -> list[str]:
    """User turns written by the target itself, deduplicated."""
    tokenizer, stop = target.tokenizer, _stop_id(target)
    header = _header_ids(target)
    openers = [rng.choice(STARTERS) if rng.random() < STARTER_SHARE else "" for _ in range(plan.prompts)]
    settings = DecodeSettings(temperature=1.0, top_p=0.95)
    seen, prompts = set(), []
    for chunk in _batches(openers, plan.batch_size):
        starts = [header + opener_ids(tokenizer, o) for o in chunk]
        for opener, start, new in zip(chunk, starts,
                                      continue_batch(target, starts, plan.prompt_tokens, settings, generator, stop)):
            if not new or new[-1] != stop or len(new) < 4:
                continue  # unfinished or empty user turn
            text = tokenizer.decode(start[len(header):] + new[:-1]).strip()
            key = " ".join(text.lower().split())
            if len(key) < 12 or key in seen:
                continue
            seen.add(key)
            prompts.append(text)
        if progress:
            progress.update(len(chunk))
    return prompts


def _stop_id(target: LoadedModel) -> int:
    eos = target.tokenizer.eos_token_id
    return eos if isinstance(eos, int) else sorted(target.eos_token_ids)[0]


def answer(target: LoadedModel, prompts: list[str], plan: DataPlan, max_new: int, rng: random.Random, generator,
           deadline: float | None, progress=None) -> list[dict]:
    """Chat-encode each prompt and let the target answer. Batches go shortest first (less padding)."""
    stop = _stop_id(target)
    encoded = sorted(((target.encode_prompt(p), p) for p in prompts), key=lambda e: len(e[0]))
    greedy, sampled = DecodeSettings(), DecodeSettings(temperature=0.7, top_p=0.95)
    rows = []
    for chunk in _batches(encoded, plan.batch_size):
        if deadline is not None and time.monotonic() > deadline and rows:
            break
        settings = sampled if rng.random() < plan.sampled_share else greedy
        ids = [e[0] for e in chunk]
        for (prompt_ids, text), new in zip(chunk, continue_batch(target, ids, max_new, settings, generator, stop)):
            if new:
                rows.append({"prompt": text, "ids": prompt_ids + new, "prompt_length": len(prompt_ids),
                             "greedy": settings.greedy})
        if progress:
            progress.update(len(chunk))
    return rows


def long_context_prompts(rows: list[dict], prompts: list[str], count: int, target: LoadedModel,
                         rng: random.Random) -> dict[str, set[int]]:
    """Answers become documents inside new prompts; questions come from other Magpie prompts. Returns each
    prompt with the row ids of the answers it quotes (so that a held-out answer is never quoted in training)."""
    docs = [(r["row_id"], target.tokenizer.decode(r["ids"][r["prompt_length"]:], skip_special_tokens=True).strip())
            for r in rows if len(r["ids"]) - r["prompt_length"] >= 96]
    if not docs:
        return {}
    out: dict[str, set[int]] = {}
    for _ in range(count):
        source, doc = docs[rng.choice(range(len(docs)))]
        sources = {source}
        if rng.random() < 0.3:
            second, text = docs[rng.choice(range(len(docs)))]
            doc, sources = doc + "\n\n" + text, sources | {second}
        prompt = rng.choice(LONG_TEMPLATES).format(doc=doc, question=rng.choice(prompts))
        out.setdefault(prompt, set()).update(sources)
    return out


def german_prompts(rows: list[dict], count: int, target: LoadedModel, rng: random.Random,
                   templates: list[str], max_tokens: int = 160) -> dict[str, set[int]]:
    """Prompts that ask for a translation of an answer (cut to max_tokens), with the row ids they quote."""
    docs = [r for r in rows if len(r["ids"]) - r["prompt_length"] >= 24]
    out: dict[str, set[int]] = {}
    for _ in range(min(count, len(docs))):
        row = rng.choice(docs)
        answer_ids = row["ids"][row["prompt_length"]:][:max_tokens]
        doc = target.tokenizer.decode(answer_ids, skip_special_tokens=True).strip()  # the end-of-turn token dropped
        out.setdefault(rng.choice(templates).format(doc=doc), set()).update({row["row_id"], *row.get("sources", [])})
    return out


def build_dataset(target: LoadedModel, plan: DataPlan, log=print) -> dict:
    """{"sequences": [[ids]], "prompt_lengths", "greedy", "row_ids", "sources" (row ids of the answers a
    long-context prompt quotes), "plan", "stats"}: prompt + answer token ids, one conversation per row."""
    from tqdm.auto import tqdm

    start = time.monotonic()
    deadline = start + plan.minutes * 60 if plan.minutes else None
    rng = random.Random(plan.seed)
    generator = torch.Generator(device=target.device).manual_seed(plan.seed)
    with tqdm(total=plan.prompts, desc="prompts (Magpie)", unit="prompt") as bar:
        prompts = magpie_prompts(target, plan, rng, generator, bar)
    log(f"{len(prompts)} distinct prompts from {plan.prompts} asked, {time.monotonic() - start:.0f}s")
    rng.shuffle(prompts)
    with tqdm(total=len(prompts), desc="answers", unit="prompt") as bar:
        rows = answer(target, prompts, plan, plan.response_tokens, rng, generator, deadline, bar)
    for row_id, row in enumerate(rows):
        row["row_id"], row["sources"] = row_id, []
    long_prompts = long_context_prompts(rows, prompts, int(len(rows) * plan.long_share), target, rng)

    def extra_round(quoted: dict[str, set[int]], desc: str, max_new: int):
        """Answer prompts that quote earlier answers (within extra_minutes); returns the new rows."""
        round_deadline = None if deadline is None else max(deadline, time.monotonic()) + plan.extra_minutes * 60
        with tqdm(total=len(quoted), desc=desc, unit="prompt") as bar:
            new_rows = answer(target, list(quoted), plan, max_new, rng, generator, round_deadline, bar)
        for row_id, row in enumerate(new_rows, start=len(rows)):
            row["row_id"], row["sources"] = row_id, sorted(quoted[row["prompt"]])
        return new_rows

    long_rows = extra_round(long_prompts, "long-context answers", plan.response_tokens // 2)
    rows += long_rows
    german_rows = []
    if plan.german_share > 0:
        count = int((len(rows) - len(long_rows)) * plan.german_share)
        to_german = extra_round(german_prompts(rows[: len(rows) - len(long_rows)], count, target, rng, TO_GERMAN),
                                "answers into German", plan.response_tokens // 2)
        rows += to_german
        back = extra_round(german_prompts(to_german, len(to_german), target, rng, FROM_GERMAN),
                           "German into English", plan.response_tokens // 2)
        rows += back
        german_rows = to_german + back
    rng.shuffle(rows)
    answer_tokens = sum(len(r["ids"]) - r["prompt_length"] for r in rows)
    stats = {"prompts_asked": plan.prompts, "prompts_kept": len(prompts), "conversations": len(rows),
             "long_context_conversations": len(long_rows), "german_conversations": len(german_rows),
             "answer_tokens": answer_tokens,
             "total_tokens": sum(len(r["ids"]) for r in rows), "seconds": round(time.monotonic() - start, 1),
             "examples": [r["prompt"][:200] for r in rows[:8]]}
    log(f"dataset: {stats['conversations']} conversations, {answer_tokens} answer tokens, {stats['seconds']}s")
    for example in stats["examples"]:
        log(f"  example prompt: {example[:160]!r}")
    return {"sequences": [r["ids"] for r in rows], "prompt_lengths": [r["prompt_length"] for r in rows],
            "greedy": [r["greedy"] for r in rows], "row_ids": [r["row_id"] for r in rows],
            "sources": [r["sources"] for r in rows], "plan": asdict(plan), "stats": stats}


def token_frequencies(data: dict, vocab_size: int) -> torch.Tensor:
    """How often each token appears in the answers (what a drafter proposes)."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for ids, prompt_length in zip(data["sequences"], data["prompt_lengths"]):
        counts += torch.bincount(torch.tensor(ids[prompt_length:], dtype=torch.long), minlength=vocab_size)
    return counts


def draft_vocabulary(data: dict, vocab_size: int, size: int) -> tuple[torch.Tensor | None, float]:
    """The `size` most frequent answer tokens (sorted ids) and the share of answer tokens they cover;
    None (the full vocabulary) when size >= vocab_size or size is 0."""
    counts = token_frequencies(data, vocab_size)
    if not size or size >= vocab_size:
        return None, 1.0
    top = torch.topk(counts, size).indices
    coverage = float(counts[top].sum()) / max(1, int(counts.sum()))
    return top.sort().values, coverage


def is_datastore(path) -> bool:
    """A retrieval datastore (its folder or its datastore.npz) rather than a data file."""
    path = Path(path)
    return path.suffix == ".npz" or (path.is_dir() and (path / "datastore.npz").is_file())


def datastore_dataset(path, target: LoadedModel) -> dict:
    """The answers a retrieval datastore holds (the target's own, train-drafter --method retrieval wrote them) as
    a data set: each after the chat template's header of an empty user turn, since the datastore keeps no
    prompts. No generation: a drafter trained on it reuses the answers already written."""
    from ..proposers.datastore import Datastore

    folder = Path(path).parent if Path(path).suffix == ".npz" else Path(path)
    answers = Datastore.load(folder, target.vocab_size).texts()
    header_ids = target.encode_prompt("", chat=True)  # as the engine frames a prompt
    return {"sequences": [header_ids + answer for answer in answers],
            "prompt_lengths": [len(header_ids)] * len(answers),
            "stats": {"source": f"the answers of the datastore {folder}", "conversations": len(answers),
                      "answer_tokens": sum(len(a) for a in answers)}}


def save_dataset(data: dict, path) -> None:
    torch.save(data, path)


def load_dataset(path) -> dict:
    return torch.load(path, weights_only=True)
