"""A Hugging Face tokenizer as the llm.c tokenizer file, and as the files a Hugging Face directory carries: what
prepare_data.py (--tokenizer hf), import_hf.py (--tokenizer_out) and export_hf.py (--tokenizer) share.

    load(path)                             a tokenizer.json, or a directory holding one, as an HfTokenizer
    encoder(path)                          only its tokenizers.Tokenizer (what encoding needs)
    token_bytes(hf)                        the bytes of every token id (None for an id no token has)
    document_token(hf, doc_token=None)     (id, text, why) of the token that starts each document
    llmc_tokenizer_bytes(table, eot, where)  the llm.c tokenizer file (core/tokenizer.h) of those bytes
    llmc_tokenizer_file(hf_dir, V, ...)    the llm.c tokenizer file of a checkpoint directory, V tokens
    hf_tokenizer_files(source, maxT, V)    tokenizer.json, tokenizer_config.json, special_tokens_map.json to export
All raise TokenizerRefused with a one-line reason naming the file.

The bytes of a token are the text it stands for, as the tokenizer's decoder gives them back: a byte-level BPE
(GPT-2's, Llama 3's: a ByteLevel decoder) stores each byte as one printable character (GPT-2's bytes_to_unicode
table), mapped back here; a sentencepiece-style vocabulary (Llama 2's tokenizer.json: a Replace or Metaspace
decoder) writes a space as U+2581 and, with byte_fallback, a byte as the piece <0xNN>; added tokens (<s>,
<|begin_of_text|>, ...) are their text. Concatenating the bytes of an encoding then gives the text back (with
sentencepiece's one leading space). Another decoder (WordPiece, ...) is refused.

The document token: --doc_token where given, else the BOS that the tokenizer's tokenizer_config.json names, else
<|endoftext|>. The llm.c tokenizer file's eot field holds it, and prepare_data.py starts each document with it.

Needs the `tokenizers` package for tokenizer.json, `sentencepiece` for a tokenizer.model.
"""
import json
import os
import struct
from collections import namedtuple

TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2
ENDOFTEXT = "<|endoftext|>"
SPACE_MARK = "\u2581"  # sentencepiece's visible space


class TokenizerRefused(Exception):
    """A one-line reason the tokenizer cannot be read or written."""


# tokenizer: the tokenizers.Tokenizer; parts: the JSON of its decoder, pre_tokenizer and post_processor (None where
# it has none) and its model's byte_fallback; added: {id: text} of its added tokens; config: the
# tokenizer_config.json beside it ({} when there is none)
HfTokenizer = namedtuple("HfTokenizer", "path tokenizer parts added config config_path")


def read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TokenizerRefused(f"{path}: cannot read: {e.strerror or e}")


def json_path(path):
    """The tokenizer.json of path: path itself, or the one in the directory path."""
    found = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    if not os.path.isfile(found):
        raise TokenizerRefused(f"{path}: no tokenizer.json")
    return found


def encoder(path):
    """The tokenizers.Tokenizer of the tokenizer.json at path (or in the directory path), which encodes."""
    found = json_path(path)
    try:
        import tokenizers
    except ImportError:
        raise TokenizerRefused(f"{found}: reading it needs the Python package tokenizers (pip install tokenizers, "
                               "or make clients_deps)")
    try:
        return tokenizers.Tokenizer.from_file(found)
    except Exception as e:  # the tokenizers package raises its own Exception on what it cannot parse
        raise TokenizerRefused(f"{found}: not a tokenizers tokenizer.json: {' '.join(str(e).split())}")


def tokenizer_config(directory):
    """(path, its JSON) of a directory's tokenizer_config.json; the JSON is {} when there is none."""
    path = os.path.join(directory, "tokenizer_config.json") if directory else None
    if not path or not os.path.isfile(path):
        return path, {}
    try:
        config = json.loads(read_bytes(path))
    except ValueError as e:
        raise TokenizerRefused(f"{path}: not JSON: {e}")
    return path, config if isinstance(config, dict) else {}


def load(path):
    """A tokenizer.json file, or a checkpoint directory holding tokenizer.json (and usually tokenizer_config.json,
    which names the BOS)."""
    tokenizer = encoder(path)
    # each part's JSON as the library serializes it (its pickled state), not tokenizer.json whole, whose
    # vocabulary and merges would take hundreds of MB as Python objects
    parts = {name: json.loads(part.__getstate__()) if part is not None else None
             for name, part in (("decoder", tokenizer.decoder), ("pre_tokenizer", tokenizer.pre_tokenizer),
                                ("post_processor", tokenizer.post_processor))}
    parts["byte_fallback"] = bool(getattr(tokenizer.model, "byte_fallback", False))
    added = {i: t.content for i, t in tokenizer.get_added_tokens_decoder().items()}
    found = json_path(path)
    config_path, config = tokenizer_config(os.path.dirname(os.path.abspath(found)))
    return HfTokenizer(found, tokenizer, parts, added, config, config_path)


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


def component_types(node):
    """[(type, its JSON)] of a decoder or pre-tokenizer, a Sequence's members included."""
    if not node:
        return []
    members = node.get("decoders") or node.get("pretokenizers")
    if node.get("type") == "Sequence" and members:
        return [t for member in members for t in component_types(member)]
    return [(node.get("type"), node)]


def token_style(hf):
    """('byte_level' or 'sentencepiece', byte fallback), from the decoder, else the pre-tokenizer (a tokenizer.json
    may have been saved without a decoder)."""
    for node in (hf.parts["decoder"], hf.parts["pre_tokenizer"]):
        types = component_types(node)
        names = {t for t, _ in types}
        if "ByteLevel" in names:
            return "byte_level", False
        marks_space = any(t == "Replace" and part.get("pattern") == {"String": SPACE_MARK} for t, part in types)
        if "Metaspace" in names or marks_space:
            return "sentencepiece", "ByteFallback" in names or hf.parts["byte_fallback"]
    found = sorted({t for t, _ in component_types(hf.parts["decoder"])} - {None}) or ["none"]
    raise TokenizerRefused(f"{hf.path}: decoder {', '.join(found)} is neither a byte-level BPE (ByteLevel) nor "
                           "sentencepiece pieces (Replace, Metaspace): the bytes of its tokens are unknown")


def vocab_size(hf):
    """1 + the largest token id (added tokens included)."""
    return max(hf.tokenizer.get_vocab(with_added_tokens=True).values(), default=-1) + 1


def token_bytes(hf):
    """[the bytes of token id, or None for an id no token has] for ids 0 .. vocab_size(hf) - 1."""
    style, byte_fallback = token_style(hf)
    chars = byte_level_chars()
    table = []
    for i in range(vocab_size(hf)):
        text = hf.tokenizer.id_to_token(i)
        if text is None:
            table.append(None)
        elif i in hf.added and style == "byte_level":
            table.append(text.encode("utf-8"))
        elif style == "byte_level":
            # as the tokenizers library's ByteLevel decoder: a token with a character outside the alphabet is
            # its UTF-8 text
            table.append(bytes(chars[c] for c in text) if all(c in chars for c in text) else text.encode("utf-8"))
        elif byte_fallback and i not in hf.added and len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
            table.append(bytes([int(text[3:5], 16)]))
        else:  # an added token too: matched in text where sentencepiece's normalizer made spaces U+2581
            table.append(text.replace(SPACE_MARK, " ").encode("utf-8"))
    return table


def special_token_text(value):
    """A tokenizer_config.json special token: a string, or an AddedToken dict with its content."""
    return value.get("content") if isinstance(value, dict) else value


def choose_document_token(lookup, config, config_path, doc_token, where):
    """(id, text, why) of the token that starts documents, lookup(text) giving a token's id or None: doc_token,
    else the BOS config (tokenizer_config.json) names, else <|endoftext|>."""
    if doc_token is not None:
        if lookup(doc_token) is None:
            raise TokenizerRefused(f"--doc_token {doc_token!r}: not a token of {where}")
        return lookup(doc_token), doc_token, "--doc_token"
    bos = special_token_text(config.get("bos_token"))
    if bos is not None:
        if lookup(bos) is None:
            raise TokenizerRefused(f"{config_path}: bos_token {bos!r} is not a token of {where}")
        return lookup(bos), bos, f"the bos_token of {config_path}"
    if lookup(ENDOFTEXT) is not None:
        return lookup(ENDOFTEXT), ENDOFTEXT, "no bos_token is named"
    raise TokenizerRefused(f"{where}: no bos_token in tokenizer_config.json and no {ENDOFTEXT} token: name the token "
                           "that starts documents with --doc_token")


def document_token(hf, doc_token=None):
    """(id, text, why) of the token that starts each document (see choose_document_token)."""
    return choose_document_token(hf.tokenizer.token_to_id, hf.config, hf.config_path, doc_token, hf.path)


def llmc_tokenizer_bytes(table, eot, where):
    """The llm.c tokenizer file of table (the bytes of each token id) with eot in its header. An id no token has
    reads <|unused_ID|>; the format holds tokens of 1 to 255 bytes, and another is refused."""
    out = [struct.pack("<256I", TOKENIZER_MAGIC, TOKENIZER_VERSION, len(table), eot, *([0] * 252))]
    for i, b in enumerate(table):
        b = f"<|unused_{i}|>".encode() if b is None else b
        if not 1 <= len(b) <= 255:
            raise TokenizerRefused(f"{where}: token {i} has {len(b)} bytes; the llm.c tokenizer file holds tokens of "
                                   "1..255 bytes")
        out.append(bytes([len(b)]) + b)
    return b"".join(out)


def sentencepiece_vocab(path):
    """(lookup of a piece's id, [bytes of each id], bos id) of a sentencepiece tokenizer.model, with
    prepare_data.py's --tokenizer llama2 reading of the pieces."""
    import prepare_data  # the one reading of Llama 2's sentencepiece pieces; it ends the script on a bad file

    tok = prepare_data.load_llama2(path)
    return tok.lookup, tok.vocab(), tok.doc_token()[0]


def llmc_tokenizer_file(hf_dir, V, doc_token=None):
    """(the bytes of an llm.c tokenizer file of V tokens, its eot id, that token's text) of a checkpoint directory's
    tokenizer.json, else its tokenizer.model. Ids past the tokenizer's own (a model's vocabulary padded beyond it)
    read <|unused_ID|>."""
    json_file, model_path = os.path.join(hf_dir, "tokenizer.json"), os.path.join(hf_dir, "tokenizer.model")
    if os.path.isfile(json_file):
        hf = load(hf_dir)
        where, table = hf.path, token_bytes(hf)
        eot, eot_text, _ = document_token(hf, doc_token)
    elif os.path.isfile(model_path):
        where = model_path
        lookup, table, bos = sentencepiece_vocab(model_path)
        config_path, config = tokenizer_config(hf_dir)
        if doc_token is None and config.get("bos_token") is None:
            eot, eot_text = bos, table[bos].decode("utf-8", "replace")
        else:
            eot, eot_text, _ = choose_document_token(lookup, config, config_path, doc_token, where)
    else:
        raise TokenizerRefused(f"{hf_dir}: no tokenizer.json or tokenizer.model for --tokenizer_out")
    if len(table) > V:
        raise TokenizerRefused(f"{where}: {len(table)} tokens, more than the model's vocab_size {V}")
    return llmc_tokenizer_bytes(table + [None] * (V - len(table)), eot, where), eot, eot_text


def hf_tokenizer_files(source, maxT, V):
    """({file name: bytes} to write beside an export, bos id, eos id; None where the tokenizer names none) for a
    tokenizer given as a directory with tokenizer.json (its tokenizer_config.json and special_tokens_map.json
    copied when present) or as a tokenizer.json file (a tokenizer_config.json written for it:
    PreTrainedTokenizerFast, BOS and EOS <|endoftext|> where the vocabulary has it)."""
    directory = source if os.path.isdir(source) else None
    if not os.path.isfile(os.path.join(source, "tokenizer.json") if directory else source):
        raise TokenizerRefused(f"{source}: no tokenizer.json (the export writes the tokenizers format; a "
                               "sentencepiece tokenizer.model alone is not converted)")
    hf = load(source)
    if vocab_size(hf) > V:
        raise TokenizerRefused(f"{hf.path}: {vocab_size(hf)} tokens, more than the model's vocabulary {V}")
    files = {"tokenizer.json": read_bytes(hf.path)}
    config_path, config = tokenizer_config(directory)
    if config:
        files["tokenizer_config.json"] = read_bytes(config_path)
    else:
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": maxT,
                  "clean_up_tokenization_spaces": False}
        if hf.tokenizer.token_to_id(ENDOFTEXT) is not None:  # GPT-2's convention; another names no BOS or EOS
            config.update(bos_token=ENDOFTEXT, eos_token=ENDOFTEXT)
        files["tokenizer_config.json"] = (json.dumps(config, indent=2) + "\n").encode()
    special = {k: config[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token") if config.get(k) is not None}
    map_path = os.path.join(directory, "special_tokens_map.json") if directory else ""
    files["special_tokens_map.json"] = read_bytes(map_path) if os.path.isfile(map_path) else \
        (json.dumps(special, indent=2) + "\n").encode()
    ids = {}
    for k in ("bos_token", "eos_token"):
        text = special_token_text(special.get(k))
        ids[k] = hf.tokenizer.token_to_id(text) if text is not None else None
    return files, ids["bos_token"], ids["eos_token"]
