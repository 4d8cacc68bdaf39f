"""Which template is used: the tokenizer's own, found where transformers finds it; never a silent fallback."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import real_asset

from packcli.chat import LossPolicy, load_template, require_markers
from packcli.chat.templates import BUILTIN_CHATML, BUILTIN_NOTE
from packcli.errors import InputError
from packcli.tokenizer.load import find_chat_templates, load_tokenizer

MARKED = "{% for m in messages %}{{ m.content }}{% generation %}.{% endgeneration %}{% endfor %}"


@pytest.fixture()
def bare_tokenizer(tmp_path, tokenizer_dir):
    """The fixture tokenizer (ChatML's tokens in its vocabulary) with no chat template of its own."""
    shutil.copy(tokenizer_dir / "tokenizer.json", tmp_path / "tokenizer.json")
    config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


def _hf_save(directory, template) -> object:
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(directory))
    hf.chat_template = template
    hf.save_pretrained(str(directory))
    return transformers.AutoTokenizer.from_pretrained(str(directory)).chat_template


def test_chat_template_jinja_beside_the_tokenizer_is_found_as_transformers_finds_it(bare_tokenizer):
    """What transformers writes on save (chat_template.jinja) is what transformers and packcli read back."""
    theirs = _hf_save(bare_tokenizer, MARKED)
    assert (bare_tokenizer / "chat_template.jinja").is_file()
    template = load_template("auto", load_tokenizer(bare_tokenizer))
    assert template.text == theirs == MARKED
    assert template.source == "tokenizer:chat_template.jinja" and template.note == ""


def test_named_templates_are_found_and_picked_by_name(bare_tokenizer):
    theirs = _hf_save(bare_tokenizer, {"default": MARKED, "tool_use": MARKED + "{{ tools }}"})
    assert (bare_tokenizer / "additional_chat_templates" / "tool_use.jinja").is_file()
    tok = load_tokenizer(bare_tokenizer)
    assert {name: text for name, (text, _) in tok.chat_templates().items()} == theirs
    default = load_template("auto", tok)
    assert default.name == "default" and default.text == MARKED
    assert "it also has tool_use" in default.note and "--template NAME" in default.note
    tool_use = load_template("tool_use", tok)
    assert tool_use.text == theirs["tool_use"] and tool_use.source == "tokenizer:additional_chat_templates/tool_use.jinja"
    with pytest.raises(InputError, match=r"template rag: no such file, and not a named template of the tokenizer "
                                         r"\(the tokenizer's templates: default, tool_use\)"):
        load_template("rag", tok)


def test_a_list_of_named_templates_in_tokenizer_config(bare_tokenizer):
    """The older form: ``chat_template`` is a list of {name, template}; transformers reads it as a dict."""
    transformers = pytest.importorskip("transformers")
    config = json.loads((bare_tokenizer / "tokenizer_config.json").read_text())
    config["chat_template"] = [{"name": "default", "template": MARKED}, {"name": "rag", "template": MARKED + "r"}]
    (bare_tokenizer / "tokenizer_config.json").write_text(json.dumps(config))
    theirs = transformers.AutoTokenizer.from_pretrained(str(bare_tokenizer)).chat_template
    tok = load_tokenizer(bare_tokenizer)
    assert {name: text for name, (text, _) in tok.chat_templates().items()} == theirs
    assert load_template("rag", tok).text == MARKED + "r"
    config["chat_template"] = [{"name": "rag", "template": MARKED}]  # several, none named default
    (bare_tokenizer / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match="none named default: rag"):
        load_template("auto", load_tokenizer(bare_tokenizer))


def test_builtin_chatml_only_without_a_template_and_with_chatml_tokens(bare_tokenizer):
    template = load_template("auto", load_tokenizer(bare_tokenizer))
    assert template.source == BUILTIN_CHATML and template.note == BUILTIN_NOTE
    assert "built-in ChatML" in template.describe()


@pytest.mark.real
def test_a_tokenizer_without_template_or_chatml_tokens_is_refused():
    """Llama 3.2's tokenizer has no template, and <|im_start|> is not one of its tokens: refuse, with the hint."""
    tok = load_tokenizer(real_asset("llama3_2"))
    with pytest.raises(InputError, match="has no chat template, and ChatML's") as info:
        load_template("auto", tok)
    assert "`template=" in info.value.hint
    with pytest.raises(InputError, match="`template='chatml'`: <\\|im_start\\|> and <\\|im_end\\|> are not tokens"):
        load_template("chatml", tok)


def test_a_template_without_markers_fails_under_an_assistant_loss_never_falls_back(bare_tokenizer):
    (bare_tokenizer / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    template = load_template("auto", load_tokenizer(bare_tokenizer))
    assert template.source == "tokenizer:chat_template.jinja"
    with pytest.raises(InputError, match="has no \\{% generation %\\} markers") as info:
        require_markers(template, LossPolicy.assistant)
    assert "`template='trl:NAME'`" in info.value.hint and "`loss='all'`" in info.value.hint
    require_markers(template, LossPolicy.all)  # the whole text needs no markers


@pytest.mark.real
def test_qwen3s_own_template_has_no_markers_and_is_not_replaced():
    tok = load_tokenizer(real_asset("qwen3"))
    template = load_template("auto", tok)
    assert template.source == "tokenizer:tokenizer_config.json" and not template.has_generation_markers
    with pytest.raises(InputError, match="no \\{% generation %\\} markers"):
        require_markers(template, LossPolicy.last_assistant)


def test_a_template_directory_and_a_bad_config_entry(bare_tokenizer, tmp_path_factory):
    other = tmp_path_factory.mktemp("other")
    (other / "chat_template.jinja").write_text(MARKED)
    assert load_template(str(other)).text == MARKED
    config = json.loads((bare_tokenizer / "tokenizer_config.json").read_text())
    config["chat_template"] = 42
    (bare_tokenizer / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match="chat_template is neither a string nor a list"):
        find_chat_templates(bare_tokenizer)


def test_an_edited_template_is_read_again_by_a_cached_tokenizer(bare_tokenizer):
    """A tokenizer is loaded once per process; its templates are read each time a template is resolved."""
    from packcli.tokenizer.load import cached_tokenizer

    tok = cached_tokenizer(bare_tokenizer)
    assert load_template("auto", tok).source == BUILTIN_CHATML
    (bare_tokenizer / "chat_template.jinja").write_text(MARKED)
    assert cached_tokenizer(bare_tokenizer) is tok and load_template("auto", tok).text == MARKED
