"""A Hugging Face tokenizer as the llm.c tokenizer file, and as the files a Hugging Face directory carries: what
import_hf.py (--tokenizer_out) and export_hf.py (--tokenizer) share.

    token_bytes(tokenizer_json)            the bytes of every token id of a tokenizer.json
    document_token(directory, vocab, ...)  the token that starts each document (BOS), by the rule below
    llmc_tokenizer_file(hf_dir, V, ...)    the llm.c tokenizer file (core/tokenizer.h) of a checkpoint directory
    hf_tokenizer_files(source, maxT, V)    tokenizer.json, tokenizer_config.json, special_tokens_map.json to export

The bytes of a token: a byte-level BPE (GPT-2's, Llama 3's: a ByteLevel decoder) stores each byte as one
printable character (GPT-2's bytes_to_unicode table), mapped back here; a sentencepiece-style vocabulary (Llama 2's
tokenizer.json: a Replace or Metaspace decoder) writes a space as U+2581 and, with byte_fallback, a byte as the
piece <0xNN>; added tokens (<s>, <|begin_of_text|>, ...) are their text. Concatenating the bytes of an encoding
then gives the text back (with sentencepiece's one leading space).

The document token: the BOS that the tokenizer's tokenizer_config.json names, else <|endoftext|>; an explicit
choice (--doc_token) overrides. scripts/prepare_data.py's hf tokenizer starts documents with the same token.

Needs the `tokenizers` package for tokenizer.json, `sentencepiece` for a tokenizer.model.
"""
import json
import os
import struct

TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2
ENDOFTEXT = "<|endoftext|>"


class TokenizerRefused(Exception):
    """A one-line reason the tokenizer cannot be written."""


def byte_level_chars():
    """GPT-2's bytes_to_unicode, inverted: {printable character: the byte it stands for}. The bytes that print as
    themselves (! to ~, and Latin-1's ¡ to ¬ and ® to ÿ) keep their code point; the other 68 take U+0100 on, in
    byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def decoder_types(decoder):
    """The types of a tokenizer.json decoder, a Sequence's members included."""
    if not decoder:
        return []
    if decoder.get("type") == "Sequence":
        return [t for d in decoder.get("decoders", []) for t in decoder_types(d)]
    return [decoder.get("type")]


def load_tokenizer_json(path):
    try:
        import tokenizers
    except ImportError:
        raise TokenizerRefused(f"{path}: reading it needs the Python package tokenizers (pip install tokenizers, "
                               "or make clients_deps)")
    try:
        return tokenizers.Tokenizer.from_file(path), json.loads(read_bytes(path))
    except Exception as e:  # the tokenizers package raises its own Exception on what it cannot parse
        raise TokenizerRefused(f"{path}: not a tokenizers tokenizer.json: {' '.join(str(e).split())}")


def token_bytes(path):
    """({token text: id} of the whole vocabulary, added tokens included; [bytes of token id, or None for an id no
    token has]) of a tokenizer.json."""
    tokenizer, spec = load_tokenizer_json(path)
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    added = {token.content for token in tokenizer.get_added_tokens_decoder().values()}
    types = decoder_types(spec.get("decoder"))
    if "ByteLevel" in types:
        chars = byte_level_chars()

        def to_bytes(text):
            if any(c not in chars for c in text):
                raise TokenizerRefused(f"{path}: token {text!r} has a character outside the byte-level alphabet")
            return bytes(chars[c] for c in text)
    elif "Replace" in types or "Metaspace" in types or "ByteFallback" in types:
        byte_fallback = bool(spec.get("model", {}).get("byte_fallback"))

        def to_bytes(text):
            if byte_fallback and len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
                return bytes([int(text[3:5], 16)])
            return text.replace("\u2581", " ").encode("utf-8")
    else:
        raise TokenizerRefused(f"{path}: decoder {types or None}: neither a byte-level BPE (ByteLevel) nor "
                               "sentencepiece pieces (Replace, Metaspace, ByteFallback); its tokens' bytes are unknown")
    table = [None] * (max(vocab.values()) + 1 if vocab else 0)
    for text, i in vocab.items():
        table[i] = text.encode("utf-8") if text in added else to_bytes(text)
    return vocab, table


def special_token_text(value):
    """A tokenizer_config.json special token: a string, or an AddedToken dict with its content."""
    return value.get("content") if isinstance(value, dict) else value


def tokenizer_config(directory):
    path = os.path.join(directory, "tokenizer_config.json") if directory else None
    if not path or not os.path.isfile(path):
        return {}
    try:
        config = json.loads(read_bytes(path))
    except ValueError as e:
        raise TokenizerRefused(f"{path}: not JSON: {e}")
    return config if isinstance(config, dict) else {}


def document_token(directory, vocab, doc_token=None, where=None):
    """(id, text) of the token that starts documents: doc_token, else the BOS directory's tokenizer_config.json
    names, else <|endoftext|>."""
    where = where or directory
    if doc_token is not None:
        if doc_token not in vocab:
            raise TokenizerRefused(f"--doc_token {doc_token!r}: not a token of {where}")
        return vocab[doc_token], doc_token
    bos = special_token_text(tokenizer_config(directory).get("bos_token"))
    if bos is not None:
        if bos not in vocab:
            raise TokenizerRefused(f"{directory}/tokenizer_config.json: bos_token {bos!r} is not a token of {where}")
        return vocab[bos], bos
    if ENDOFTEXT in vocab:
        return vocab[ENDOFTEXT], ENDOFTEXT
    raise TokenizerRefused(f"{where}: no bos_token in tokenizer_config.json and no {ENDOFTEXT} token: name the token "
                           "that starts documents with --doc_token")


def sentencepiece_vocab(path):
    """({piece: id}, [bytes of each id], bos id) of a sentencepiece tokenizer.model, with prepare_data.py's
    --tokenizer llama2 reading of the pieces."""
    import prepare_data  # the one reading of Llama 2's sentencepiece pieces; it ends the script on a bad file

    _, table, bos = prepare_data.load_llama2(path)
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=path)
    return {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}, table, bos


def llmc_tokenizer_file(hf_dir, V, doc_token=None):
    """(the bytes of an llm.c tokenizer file of V tokens, its eot id, that token's text) of a checkpoint directory's
    tokenizer.json, else its tokenizer.model. Ids past the tokenizer's own (a model's vocabulary padded beyond it)
    read <|unused_ID|>."""
    json_path, model_path = os.path.join(hf_dir, "tokenizer.json"), os.path.join(hf_dir, "tokenizer.model")
    if os.path.isfile(json_path):
        where = json_path
        vocab, table = token_bytes(json_path)
        eot, eot_text = document_token(hf_dir, vocab, doc_token, where)
    elif os.path.isfile(model_path):
        where = model_path
        vocab, table, bos = sentencepiece_vocab(model_path)
        if doc_token is None and tokenizer_config(hf_dir).get("bos_token") is None:
            eot, eot_text = bos, table[bos].decode("utf-8", "replace")
        else:
            eot, eot_text = document_token(hf_dir, vocab, doc_token, where)
    else:
        raise TokenizerRefused(f"{hf_dir}: no tokenizer.json or tokenizer.model for --tokenizer_out")
    if len(table) > V:
        raise TokenizerRefused(f"{where}: {len(table)} tokens, more than the model's vocab_size {V}")
    table += [None] * (V - len(table))
    out = [struct.pack("<256I", TOKENIZER_MAGIC, TOKENIZER_VERSION, V, eot, *([0] * 252))]
    for i, b in enumerate(table):
        b = f"<|unused_{i}|>".encode() if b is None else b
        if not 1 <= len(b) <= 255:
            raise TokenizerRefused(f"{where}: token {i} has {len(b)} bytes; the llm.c tokenizer file holds tokens of "
                                   "1..255 bytes")
        out.append(bytes([len(b)]) + b)
    return b"".join(out), eot, eot_text


def read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TokenizerRefused(f"{path}: cannot read: {e.strerror or e}")


def hf_tokenizer_files(source, maxT, V):
    """({file name: bytes} to write beside an export, bos id, eos id; None where the tokenizer names none) for a
    tokenizer given as a directory with tokenizer.json (its tokenizer_config.json and special_tokens_map.json
    copied when present) or as a tokenizer.json file (a tokenizer_config.json written for it:
    PreTrainedTokenizerFast, BOS and EOS <|endoftext|> where the vocabulary has it)."""
    directory = source if os.path.isdir(source) else None
    json_path = os.path.join(source, "tokenizer.json") if directory else source
    if not os.path.isfile(json_path):
        raise TokenizerRefused(f"{source}: no tokenizer.json (the export writes the tokenizers format; a "
                               "sentencepiece tokenizer.model alone is not converted)")
    vocab, table = token_bytes(json_path)
    if len(table) > V:
        raise TokenizerRefused(f"{json_path}: {len(table)} tokens, more than the model's vocabulary {V}")
    files = {"tokenizer.json": read_bytes(json_path)}
    config = tokenizer_config(directory)
    if config:
        files["tokenizer_config.json"] = read_bytes(os.path.join(directory, "tokenizer_config.json"))
    else:
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": maxT,
                  "clean_up_tokenization_spaces": False}
        if ENDOFTEXT in vocab:  # GPT-2's convention; another tokenizer.json alone names no BOS or EOS
            config.update(bos_token=ENDOFTEXT, eos_token=ENDOFTEXT)
        files["tokenizer_config.json"] = (json.dumps(config, indent=2) + "\n").encode()
    special = {k: config[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token") if config.get(k) is not None}
    map_path = os.path.join(directory, "special_tokens_map.json") if directory else ""
    files["special_tokens_map.json"] = read_bytes(map_path) if os.path.isfile(map_path) else \
        (json.dumps(special, indent=2) + "\n").encode()
    ids = {k: vocab.get(special_token_text(special.get(k))) for k in ("bos_token", "eos_token")}
    return files, ids["bos_token"], ids["eos_token"]
