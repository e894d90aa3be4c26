"""A Hugging Face tokenizer (tokenizer.json, read with the `tokenizers` library) as an llm.c tokenizer file.

    import hf_tokenizer
    file_bytes, vocab_size, eot, why = hf_tokenizer.llmc_tokenizer("path/to/checkpoint_or_tokenizer.json")

The llm.c tokenizer file (core/tokenizer.h): 256 uint32 header [20240328, 2, V, eot], then per token a uint8
length and the token's bytes. Its eot field holds the token that begins every document, which sampling
starts from (the "document token", document_token() below).

A token's bytes are the text it stands for, as the tokenizer's decoder gives them back:
    byte-level BPE (GPT-2, Llama 3): each character of the token is one byte through GPT-2's byte-to-unicode
        table ("Ġ" is the space byte, "Ċ" the newline);
    sentencepiece style (Llama 2, Mistral): U+2581 ("▁") is a space, and with byte fallback a token "<0x0A>"
        is the byte 0x0A;
    added tokens (<s>, <|begin_of_text|>, ...): their text (in sentencepiece style with U+2581 a space),
        as the llama2 and llama3 tokenizers of prepare_data.py write them.
Other decoders (WordPiece, ...) are refused: their tokens' bytes are not defined by the tokens alone.

Functions (all raise TokenizerError with a one-line message naming the file):
    load(path)                         a tokenizer.json, or a directory holding one, as an HfTokenizer
    encoder(path)                      only its tokenizers.Tokenizer (what encoding needs)
    token_bytes(hf)                    the bytes of every token, by id
    document_token(hf, name=None)      (id, why) of the token that begins each document
    llmc_tokenizer_bytes(vocab, eot, source)  the llm.c tokenizer file of a vocabulary
    llmc_tokenizer(path, doc_token=None)      the four together: (file bytes, V, eot, why)
"""

import json
import os
import struct
from collections import namedtuple

TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2
SPACE_MARK = "\u2581"  # sentencepiece's visible space


class TokenizerError(Exception):
    """A tokenizer that cannot be read or written as an llm.c tokenizer file; the message is one line."""


# tokenizer: the tokenizers.Tokenizer; parts: the JSON of its decoder, pre_tokenizer and post_processor (None
# where it has none) and its model's byte_fallback; added: {id: text} of its added tokens; config: the
# tokenizer_config.json beside it (None when there is none)
HfTokenizer = namedtuple("HfTokenizer", "path tokenizer parts added config config_path")


def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise TokenizerError(f"{path}: cannot read: {e.strerror or e}")
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise TokenizerError(f"{path}: not valid JSON: {e}")


def json_path(path):
    """The tokenizer.json of path: path itself, or the one in the directory path."""
    found = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    if not os.path.isfile(found):
        hint = " (a sentencepiece tokenizer.model is read with --tokenizer llama2)" \
            if os.path.isfile(os.path.join(path, "tokenizer.model")) else ""
        raise TokenizerError(f"{path}: no tokenizer.json here{hint}")
    return found


def encoder(path):
    """The tokenizers.Tokenizer of the tokenizer.json at path (or in the directory path), which encodes."""
    found = json_path(path)
    try:
        import tokenizers
    except ImportError:
        raise TokenizerError(f"{found}: reading a tokenizer.json needs the Python package tokenizers, "
                             "which is not installed (pip install tokenizers)")
    try:
        return tokenizers.Tokenizer.from_file(found)
    except Exception as e:  # the library raises its own exception type on what it cannot parse
        raise TokenizerError(f"{found}: not a tokenizer.json the tokenizers library reads: "
                             f"{' '.join(str(e).split())}")


def load(path):
    """A tokenizer.json file, or a checkpoint directory holding tokenizer.json (and usually
    tokenizer_config.json, which names the bos token)."""
    tokenizer = encoder(path)
    # each part's JSON as the library serializes it (its pickled state), not tokenizer.json whole, whose
    # vocabulary and merges would take hundreds of MB as Python objects
    parts = {name: json.loads(part.__getstate__()) if part is not None else None
             for name, part in (("decoder", tokenizer.decoder), ("pre_tokenizer", tokenizer.pre_tokenizer),
                                ("post_processor", tokenizer.post_processor))}
    parts["byte_fallback"] = bool(getattr(tokenizer.model, "byte_fallback", False))
    added = {i: t.content for i, t in tokenizer.get_added_tokens_decoder().items()}
    found = json_path(path)
    config_path = os.path.join(os.path.dirname(os.path.abspath(found)), "tokenizer_config.json")
    config = read_json(config_path) if os.path.isfile(config_path) else None
    return HfTokenizer(found, tokenizer, parts, added, config, config_path)


def byte_of_char():
    """GPT-2's byte-level alphabet, inverted: the byte each of its 256 characters stands for. Printable
    Latin-1 bytes are their own character; the other 68 bytes take the characters from U+0100 on, in order."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[chr(b)] = b
        else:
            table[chr(0x100 + extra)] = b
            extra += 1
    return table


def component_types(node):
    """The types of a decoder or pre-tokenizer and of the parts of a Sequence of them, with the
    Replace components' patterns: [(type, the component's JSON)]."""
    if not node:
        return []
    parts = node.get("decoders") or node.get("pretokenizers")
    if node.get("type") == "Sequence" and parts:
        return [t for part in parts for t in component_types(part)]
    return [(node.get("type"), node)]


def token_style(hf):
    """'byte_level' or 'sentencepiece' (with byte fallback or not), from the decoder, else the
    pre-tokenizer (a tokenizer.json may have been saved without a decoder)."""
    for node in (hf.parts["decoder"], hf.parts["pre_tokenizer"]):
        parts = component_types(node)
        types = {t for t, _ in parts}
        if "ByteLevel" in types:
            return "byte_level", False
        marks_space = any(t == "Replace" and part.get("pattern") == {"String": SPACE_MARK} for t, part in parts)
        if "Metaspace" in types or marks_space:
            return "sentencepiece", "ByteFallback" in types or hf.parts["byte_fallback"]
    found = sorted({t for t, _ in component_types(hf.parts["decoder"])} - {None}) or ["none"]
    raise TokenizerError(f"{hf.path}: decoder {', '.join(found)} is neither byte-level BPE nor sentencepiece "
                         "style: the bytes of its tokens are not known")


def token_bytes(hf):
    """The bytes of every token, a list indexed by id (0 .. V-1, added tokens included)."""
    style, byte_fallback = token_style(hf)
    added = hf.added
    table = byte_of_char() if style == "byte_level" else None
    vocab = []
    for i in range(hf.tokenizer.get_vocab_size(with_added_tokens=True)):
        token = hf.tokenizer.id_to_token(i)
        if token is None:
            raise TokenizerError(f"{hf.path}: no token has the id {i} (the ids must run from 0 without gaps)")
        if i in added and style == "byte_level":
            vocab.append(added[i].encode("utf-8"))
        elif i in added:  # matched in text where sentencepiece's normalizer made spaces U+2581
            vocab.append(added[i].replace(SPACE_MARK, " ").encode("utf-8"))
        elif style == "byte_level":
            # as the tokenizers library's ByteLevel decoder: a token with a character outside the
            # alphabet is taken as its UTF-8 text
            if all(c in table for c in token):
                vocab.append(bytes(table[c] for c in token))
            else:
                vocab.append(token.encode("utf-8"))
        elif byte_fallback and len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            vocab.append(bytes([int(token[3:5], 16)]))
        else:
            vocab.append(token.replace(SPACE_MARK, " ").encode("utf-8"))
    return vocab


def config_bos(hf):
    """The bos token tokenizer_config.json names (a string, or an AddedToken's {"content": ...}), or None."""
    bos = (hf.config or {}).get("bos_token")
    if isinstance(bos, dict):
        bos = bos.get("content")
    return bos if isinstance(bos, str) and bos else None


def template_first_token(node):
    """The special token a TemplateProcessing post-processor puts first in a single text, or None."""
    if not node:
        return None
    if node.get("type") == "Sequence":
        for part in node.get("processors") or []:
            found = template_first_token(part)
            if found:
                return found
        return None
    if node.get("type") != "TemplateProcessing" or not node.get("single"):
        return None
    first = node["single"][0]
    return first["SpecialToken"]["id"] if "SpecialToken" in first else None


def document_token(hf, name=None):
    """(id, why) of the token that begins each document: the one --doc_token names; else the bos token of
    tokenizer_config.json; else the token the tokenizer.json's post-processor puts before a text; else
    <|endoftext|>."""
    if name is not None:
        choices = [(name, "--doc_token")]
    else:
        choices = [(config_bos(hf), f"the bos_token of {hf.config_path}"),
                   (template_first_token(hf.parts["post_processor"]),
                    f"the bos token {hf.path}'s post-processor puts before a text"),
                   ("<|endoftext|>", "no bos token is named")]
    for token, why in choices:
        if token is None:
            continue
        i = hf.tokenizer.token_to_id(token)
        if i is None:
            raise TokenizerError(f"{hf.path}: {why} is {token!r}, which is not one of its tokens")
        return i, f"{token} ({why})"
    raise TokenizerError(f"{hf.path}: names no bos token and has no <|endoftext|>: "
                         "name the token that begins each document with --doc_token")


def llmc_tokenizer_bytes(vocab, eot, source):
    """The llm.c tokenizer file of vocab (token bytes by id) with eot in its header. The format holds tokens
    of 1 to 255 bytes; a vocabulary with another is refused."""
    for i, b in enumerate(vocab):
        if not 1 <= len(b) <= 255:
            raise TokenizerError(f"{source}: token {i} has {len(b)} bytes; the llm.c tokenizer file holds "
                                 "tokens of 1..255 bytes")
    header = struct.pack("<256I", TOKENIZER_MAGIC, TOKENIZER_VERSION, len(vocab), eot, *([0] * 252))
    return header + b"".join(bytes([len(b)]) + b for b in vocab)


def llmc_tokenizer(path, doc_token=None):
    """(the llm.c tokenizer file's bytes, V, eot, why this eot) of the tokenizer.json at path (or in the
    directory path)."""
    hf = load(path)
    vocab = token_bytes(hf)
    eot, why = document_token(hf, doc_token)
    return llmc_tokenizer_bytes(vocab, eot, hf.path), len(vocab), eot, why
