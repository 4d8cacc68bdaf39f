"""Write the committed fixture corpus under `fixtures/corpus/`, byte for byte the same on every run.

Every conversation is written for this project: hand-written exchanges in a dozen languages
(THREADS), assembled into records by seeded `random.Random`s, plus a fixed list of edge cases
(`edge_conversations()`: special-token text in content, list-of-parts content, leading newlines,
CRLF, U+2028, long and tiny messages). Trade-off: the banks are small, so records share phrasing;
what matters to the tests is that every format and edge case is present at a known line and that
the bytes never drift (tests/test_fixtures.py regenerates everything into a temporary folder and
compares).

    openai.jsonl             120  {"messages": [{"role", "content"}]}
    sharegpt.jsonl            60  {"conversations": [{"from", "value"}]}, every role alias
    prompt_completion.jsonl   40  {"prompt", "completion"}
    text.jsonl                40  {"text"}
    openai.jsonl.gz           20  OpenAI records not in openai.jsonl; gzip mtime 0, no file name
    broken.jsonl              21  lines: 11 valid records, one line per bad case, one blank line

Usage:
    python scripts/make_fixture_corpus.py                    # writes fixtures/corpus/
    python scripts/make_fixture_corpus.py --out /tmp/corpus  # somewhere else
    python scripts/make_fixture_corpus.py --readme-tables    # print the tables in fixtures/README.md
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import struct
import sys
import unicodedata
import zlib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "fixtures" / "corpus"
ASCII_EVERY = 15  # lines 15, 30, ... use ensure_ascii=True: \uXXXX escapes, surrogate pairs for emoji
USER_ALIASES = ("human", "user")
ASSISTANT_ALIASES = ("gpt", "chatgpt", "assistant", "bing", "bard")

# --- content banks (written for this project) ----------------------------------------------------
SYSTEM_PROMPTS = {
    "en": (
        "You are a helpful assistant.",
        "You are a concise assistant. Answer in at most three sentences.",
        "You are a friendly tutor who explains things step by step.",
        "You are Packy, the packcli mascot.\nRules:\n- be brief\n- never invent numbers",
    ),
    "de": ("Du bist ein hilfsbereiter Assistent. Antworte auf Deutsch.",),
    "fr": ("Tu es un assistant serviable. Réponds en français.",),
    "es": ("Eres un asistente útil. Responde en español.",),
    "ru": ("Ты — полезный ассистент. Отвечай по-русски.",),
    "zh": ("你是一个乐于助人的助手。请用中文回答。",),
    "ja": ("あなたは親切なアシスタントです。日本語で答えてください。",),
    "ar": ("أنت مساعد مفيد. أجب باللغة العربية.",),
}

# (language, exchanges): a record uses a prefix of 1..len(exchanges) exchanges of one thread.
THREADS = (
    ("en", (
        ("How do I brew a good cup of green tea?",
         "Heat the water to about 80 °C — not boiling, or the tea turns bitter. Use one teaspoon of "
         "leaves per cup and steep for two to three minutes, then take the leaves out."),
        ("Can I reuse the leaves?",
         "Yes. Good green tea can be steeped two or three times; add about 30 seconds to each later infusion."),
        ("What about matcha?",
         "Matcha is different: you whisk the powder into the water instead of steeping it. Sift 1–2 g "
         "into a bowl, add 70 ml of 80 °C water and whisk in a quick zigzag until it foams."),
        ("How much caffeine is in it compared with coffee?",
         "A cup of green tea has roughly 20–45 mg of caffeine, matcha a bit more; brewed coffee has about 80–120 mg."),
    )),
    ("en", (
        ("What's the difference between a list and a tuple in Python?",
         "A list is mutable: you can append, remove and reassign items. A tuple is immutable, so it can "
         "be hashed and used as a dictionary key. Use a tuple for fixed records like `(x, y)` and a list "
         "for collections that grow."),
        ("Is a tuple faster?",
         "Slightly: small tuples are a bit cheaper to create and use less memory. The difference rarely "
         "matters; choose by meaning, not speed."),
    )),
    ("en", (
        ("Write a Python function that checks whether a string is a palindrome, ignoring case and punctuation.",
         "```python\ndef is_palindrome(text: str) -> bool:\n    cleaned = [c.lower() for c in text if c.isalnum()]\n"
         "    return cleaned == cleaned[::-1]\n\n\nprint(is_palindrome(\"A man, a plan, a canal: Panama\"))  # True\n"
         "```\n\nThe comprehension keeps letters and digits, lowercased, and compares them with their reverse."),
        ("Can you do it without building a new list?",
         "Walk two indices toward each other:\n\n```python\ndef is_palindrome(text: str) -> bool:\n"
         "    i, j = 0, len(text) - 1\n    while i < j:\n        if not text[i].isalnum():\n            i += 1\n"
         "        elif not text[j].isalnum():\n            j -= 1\n        elif text[i].lower() != text[j].lower():\n"
         "            return False\n        else:\n            i, j = i + 1, j - 1\n    return True\n```"),
    )),
    ("en", (
        ("I'm visiting Lisbon for three days in April. What should I not miss?",
         "Day 1: Alfama and the Castelo de São Jorge, then sunset at the Miradouro da Senhora do Monte.\n"
         "Day 2: Belém — the Jerónimos Monastery, the tower, and a pastel de nata.\n"
         "Day 3: a day trip to Sintra; go early, the palaces are crowded by 11:00."),
        ("Is tram 28 worth it?",
         "It's charming but packed. Ride it early in the morning from Martim Moniz, or walk the route — "
         "the hills are steep, so wear good shoes."),
        ("And what should I eat?",
         "Grilled sardines, bacalhau à brás, a bifana sandwich and, of course, pastéis de nata. A small "
         "tasca in Mouraria is cheaper and better than the places on Rua Augusta."),
        ("Thanks! How do I get there from the airport?",
         "The red metro line reaches the centre in about 25 minutes; a taxi takes 15–20 minutes outside rush hour."),
    )),
    ("en", (
        ("What is 17 × 23?", "17 × 23 = 391 (17 × 20 = 340, plus 17 × 3 = 51)."),
        ("And the square root of 391?", "About 19.774. It is not a perfect square: 19² = 361 and 20² = 400."),
        ("Round that to one decimal.", "19.8"),
        ("Is 391 prime?", "No: 391 = 17 × 23, as we just computed."),
    )),
    ("en", (
        ("Rewrite this email to sound more polite: \"Send me the report by Friday.\"",
         "Here's a friendlier version:\n\n\"Hi Sam,\n\nCould you please send me the report by Friday? If that "
         "timeline is difficult, let me know and we'll find another date.\n\nThanks a lot,\nAlex\""),
        ("Make it a bit more formal.",
         "\"Dear Mr. Okafor,\n\nI would be grateful if you could send me the quarterly report by Friday. "
         "Please let me know if this deadline poses any difficulty.\n\nKind regards,\nAlex Morgan\""),
    )),
    ("en", (
        ("Explain recursion to a ten-year-old.",
         "Imagine you're in a long line and want to know your place. You ask the person in front of you, "
         "who asks the person in front of them, and so on. The first person says \"I'm number 1!\" and "
         "each person adds one as the answer comes back. That's recursion: solving a problem by asking a "
         "smaller version of the same question until it becomes easy."),
    )),
    ("en", (
        ("How do I undo my last git commit but keep the changes?",
         "Run `git reset --soft HEAD~1`. The commit disappears and its changes stay staged. Use `--mixed` "
         "(the default) if you want them unstaged instead."),
        ("What if I already pushed it?",
         "Then prefer `git revert HEAD`, which adds a new commit that undoes the old one without rewriting "
         "history. Force-pushing a rewritten branch breaks things for everyone who already pulled it."),
    )),
    ("en", (
        ("I keep waking up at 3 a.m. Any tips?",
         "A few things often help: wake up at the same time every day, even on weekends; avoid caffeine "
         "after noon and alcohol in the evening; keep the bedroom cool and dark. If you're awake for more "
         "than 20 minutes, get up and read something dull in dim light. If it goes on for weeks, see a doctor."),
    )),
    ("en", (
        ("My basil plant is wilting even though I water it every day.",
         "Daily watering may be the problem: basil hates soggy roots. Make sure the pot drains, water only "
         "when the top 2 cm of soil feel dry, and give it at least six hours of sun."),
        ("The lower leaves are turning yellow too.",
         "Yellow lower leaves plus wilting usually mean overwatering or root rot. Let the soil dry out; if "
         "the roots are brown and mushy, repot it into fresh soil."),
    )),
    ("en", (
        ("How do I find duplicate emails in a users table?",
         "```sql\nSELECT email, COUNT(*) AS n\nFROM users\nGROUP BY email\nHAVING COUNT(*) > 1\nORDER BY n DESC;\n```\n"
         "If emails differ only by case, group by `LOWER(email)` instead."),
        ("And how do I keep only the oldest row of each duplicate?",
         "```sql\nDELETE FROM users u\nUSING users v\nWHERE u.email = v.email\n  AND u.id > v.id;\n```\n"
         "This is PostgreSQL syntax; back up the table first."),
    )),
    ("en", (
        ("Write a haiku about autumn.", "Maple leaves let go —\nthe wind keeps none of their names,\nonly the red sound."),
        ("Now one about code review.", "Forty comments deep,\n\"nit: trailing whitespace\" glows —\nthe build is still green."),
    )),
    ("en", (
        ("Why do people pack several short sequences into one training example?",
         "Because padding wastes compute. If batches are padded to 4096 tokens but the average conversation "
         "is 600 tokens, most of each batch is padding. Packing concatenates conversations into one buffer "
         "and uses position ids or an attention mask so tokens from different conversations can't attend "
         "to each other."),
        ("What goes wrong if the mask is missing?",
         "Tokens attend across conversation boundaries, so the model learns from context that was never "
         "really there. The loss still goes down, which is why the bug is easy to miss."),
        ("How would I test for it?",
         "Reconstruct every conversation from the packed buffers and compare it byte for byte with the "
         "input, then check that no attention edge crosses a boundary."),
        ("Does packing change the number of optimizer steps?",
         "Yes. Each step now sees more real tokens, so an epoch takes fewer steps; adjust a learning-rate "
         "schedule that is defined in steps."),
    )),
    ("en", (
        ("Convert 72 °F to Celsius.", "(72 − 32) × 5/9 ≈ 22.2 °C."),
        ("And 100 km to miles?", "100 km ≈ 62.1 miles."),
    )),
    ("de", (
        ("Wie lange muss ein Ei kochen, damit es wachsweich ist?",
         "Etwa sechs bis sieben Minuten in kochendem Wasser, je nach Größe. Danach kurz kalt abschrecken, "
         "damit es nicht weitergart."),
        ("Und hart gekocht?",
         "Für ein hartes Ei rechnet man zehn Minuten. Länger ist nicht besser: Dann wird das Eigelb grünlich."),
    )),
    ("de", (
        ("Kannst du mir den Unterschied zwischen „seit“ und „seid“ erklären?",
         "„Seit“ bezieht sich auf die Zeit: „Ich wohne seit 2019 in Köln.“ „Seid“ ist eine Form von „sein“: "
         "„Ihr seid herzlich eingeladen.“ Eselsbrücke: „seit“ mit t wie Zeit."),
    )),
    ("de", (
        ("Schreib mir bitte eine kurze Absage für ein Vorstellungsgespräch.",
         "Sehr geehrte Frau Weber,\n\nvielen Dank für die Einladung zum Vorstellungsgespräch. Nach reiflicher "
         "Überlegung ziehe ich meine Bewerbung leider zurück, da ich mich für eine andere Stelle entschieden "
         "habe.\n\nMit freundlichen Grüßen\nJonas Becker"),
        ("Danke! Geht das auch etwas kürzer?",
         "Sehr geehrte Frau Weber,\n\nich ziehe meine Bewerbung zurück und danke Ihnen für Ihr Interesse.\n\n"
         "Viele Grüße\nJonas Becker"),
    )),
    ("fr", (
        ("Quelle est la différence entre « tu » et « vous » ?",
         "« Tu » s'emploie avec les amis, la famille et les enfants ; « vous » est la forme de politesse, "
         "utilisée avec des inconnus ou au travail. « Vous » est aussi le pluriel de « tu »."),
        ("Et entre collègues ?",
         "Ça dépend de l'entreprise. Dans beaucoup de start-up on se tutoie tout de suite ; dans une banque, "
         "on attend souvent que la personne la plus âgée propose le tutoiement."),
    )),
    ("fr", (
        ("Donne-moi une recette simple de crêpes.",
         "Pour une douzaine de crêpes : 250 g de farine, 4 œufs, 50 cl de lait, une pincée de sel et 50 g de "
         "beurre fondu. Mélangez la farine et les œufs, ajoutez le lait petit à petit, puis le beurre. "
         "Laissez reposer une heure et faites cuire dans une poêle bien chaude."),
        ("Je n'ai pas de beurre, c'est grave ?",
         "Pas du tout : remplacez-le par deux cuillères à soupe d'huile neutre."),
    )),
    ("es", (
        ("¿Cuál es la diferencia entre «ser» y «estar»?",
         "«Ser» describe características esenciales: «Ana es alta». «Estar» describe estados o ubicaciones: "
         "«Ana está cansada», «Madrid está en España». Ojo: «es listo» (inteligente) frente a «está listo» "
         "(preparado)."),
        ("¿Y con las profesiones?",
         "Con las profesiones se usa «ser»: «Mi hermana es médica». «Estar de» indica un trabajo temporal: "
         "«Este verano estoy de camarero»."),
    )),
    ("es", (
        ("Necesito un plan para correr 5 km.",
         "Semanas 1–2: alterna 1 minuto corriendo y 2 caminando, 20 minutos, tres días por semana.\n"
         "Semanas 3–4: 3 minutos corriendo y 1 caminando.\nSemanas 5–6: corre 10 minutos seguidos.\n"
         "Semanas 7–8: intenta 25–30 minutos sin parar. ¡Descansa un día entre entrenamientos!"),
    )),
    ("ru", (
        ("Как правильно: «в течение» или «в течении»?",
         "Если речь о времени — «в течение»: «в течение недели». «В течении» пишут о течении реки: «в течении Волги»."),
        ("Спасибо! А «вследствие»?", "«Вследствие» пишется слитно и с «е» на конце: «вследствие дождя матч перенесли»."),
    )),
    ("ru", (
        ("Посоветуй, что почитать из русской классики.",
         "Начни с «Героя нашего времени» Лермонтова — он короткий и очень живой. Потом «Отцы и дети» "
         "Тургенева и рассказы Чехова. Если хочется большого романа — «Преступление и наказание»."),
    )),
    ("zh", (
        ("怎样才能提高中文的听力？",
         "可以每天听十五分钟播客或者看带字幕的电视剧。开始时选择语速慢的内容。听完以后，把听不懂的句子写下来，查字典，再听一遍。"),
        ("有什么推荐的播客吗？", "初学者可以试试慢速中文类的节目，中级可以听访谈或者有声书。最重要的是选择你感兴趣的话题，这样更容易坚持。"),
    )),
    ("zh", (
        ("用一句话解释什么是机器学习。", "机器学习就是让计算机从数据中找到规律，然后用这些规律对新的数据做出预测。"),
    )),
    ("ja", (
        ("日本でおすすめの温泉地はどこですか？",
         "有名なのは箱根、草津、別府です。東京から近いのは箱根で、日帰りもできます。草津は湯畑が有名です。"),
        ("冬に行くならどこがいいですか？", "雪見風呂なら草津や野沢温泉がおすすめです。道路が凍ることがあるので、電車やバスで行くと安心です。"),
    )),
    ("ja", (
        ("「よろしくお願いします」を英語で何と言いますか？",
         "状況によって変わります。初対面なら \"Nice to meet you\"、仕事の依頼なら \"Thank you in advance\" が近いです。"),
    )),
    ("ar", (
        ("ما هي أفضل طريقة لتعلم لغة جديدة؟",
         "أفضل طريقة هي الممارسة اليومية: استمع إلى اللغة، وتحدث مع ناطقين بها، واقرأ نصوصاً بسيطة. خصص عشرين دقيقة كل يوم."),
        ("وكم من الوقت أحتاج؟", "يعتمد ذلك على اللغة وعلى وقتك، لكن كثيراً من المتعلمين يصلون إلى مستوى المحادثة بعد ستة أشهر."),
    )),
    ("ar", (
        ("اكتب لي جملة ترحيب قصيرة مع التشكيل.", "أَهْلًا وَسَهْلًا بِكُمْ، نَتَمَنَّى لَكُمْ يَوْمًا سَعِيدًا."),
    )),
    ("ko", (
        ("서울에서 가 볼 만한 곳을 추천해 주세요.",
         "경복궁과 북촌 한옥마을은 꼭 가 보세요. 저녁에는 남산타워에서 야경을 보고, 광장시장에서 빈대떡을 먹어 보세요."),
    )),
    ("hi", (
        ("चाय बनाने का आसान तरीका बताइए।",
         "एक कप पानी उबालें, उसमें एक चम्मच चाय पत्ती, थोड़ा अदरक और चीनी डालें। दो मिनट बाद आधा कप दूध मिलाएँ और फिर से उबाल आने दें।"),
    )),
    ("vi", (  # stored decomposed (NFD): base letters followed by combining marks
        ("Bạn có thể giới thiệu vài món ăn Việt Nam không?",
         "Tất nhiên! Phở bò, bún chả Hà Nội, bánh mì và gỏi cuốn là những món nổi tiếng nhất."),
    )),
    ("tr", (
        ("Türkçede \"ı\" ile \"i\" arasındaki fark nedir?",
         "İkisi ayrı harflerdir: noktasız \"ı\" ve noktalı \"i\". Büyük harfleri de farklıdır: \"I\" ve \"İ\"; "
         "bu yüzden \"istanbul\" büyük harfle \"İSTANBUL\" yazılır."),
    )),
    ("he", (("איך אומרים תודה בעברית?", "אומרים \"תודה\", ובצורה חמה יותר \"תודה רבה\"."),)),
    ("en", (
        ("Can you explain the German word „Schadenfreude“ with an example in both languages?",
         "It is the pleasure you feel at someone else's misfortune. Beispiel: „Als sein Rivale stolperte, "
         "spürte er ein bisschen Schadenfreude.“ — When his rival tripped, he felt a little schadenfreude."),
    )),
    ("en", (
        ("Translate \"good morning\" into five languages.",
         "- French: Bonjour\n- Spanish: Buenos días\n- Japanese: おはようございます\n- Russian: Доброе утро\n"
         "- Arabic: صباح الخير"),
    )),
    ("en", (
        ("Reply only with emoji: how was your weekend? 😄", "🏖️☀️🍦🏄‍♀️😎👍🏽"),
        ("Now a rainy Monday, same rules.", "🌧️☔😩☕☕☕💻📉"),
    )),
    ("en", (
        ("What does the 🫠 emoji mean?",
         "🫠 is the \"melting face\". People use it for embarrassment, dread or being overwhelmed."),
        ("And 👩‍👩‍👧‍👦?", "A family of two mothers and two children: four emoji joined by zero-width joiners."),
    )),
)

# Paragraphs for the long records and for text.jsonl.
LONG_EN = (
    "Sequence packing starts from a simple observation: most chat conversations are much shorter than "
    "the context window. If every example is padded to the window, the GPU spends most of its time "
    "multiplying zeros. A packer instead concatenates several conversations into one buffer and keeps a "
    "record of where each one begins and ends.",
    "That record matters because attention must not cross a boundary. With a dense mask this means a "
    "block-diagonal causal mask; with variable-length attention kernels it means passing cumulative "
    "sequence lengths so that each conversation is attended to on its own. Position ids restart at zero "
    "at each boundary, so rotary embeddings see the positions they would see without packing.",
    "Labels need the same care. Only assistant tokens should contribute to the loss, and the first token "
    "of a packed conversation must not be predicted from the last token of the previous one. In practice "
    "the label at each boundary is set to -100, the ignore index, so the cross-entropy skips it.",
    "Choosing which conversations go together is a bin-packing problem. First-fit decreasing sorts "
    "conversations by length and places each into the first buffer with room left; best-fit decreasing "
    "picks the buffer with the least room that still fits. Both are fast and usually waste only a few "
    "percent of the tokens.",
    "Conversations longer than the buffer need a policy: drop them, truncate them at the capacity, or "
    "split them across buffers. Splitting keeps every token but the second half is trained without "
    "seeing the first; truncation keeps the context but discards the tail.",
    "Packing also changes the effective batch: eight packed buffers hold a variable number of "
    "conversations. If the loss is averaged per token, that is fine; if it is averaged per conversation, "
    "long conversations count for less. Whichever you choose, write it down.",
    "A simple way to check a packer is to rebuild the original conversations from the packed buffers and "
    "compare them byte for byte. If the rebuild matches and no attention edge crosses a boundary, the "
    "packing is correct, whatever strategy produced it.",
    "Bread dough needs time more than effort. Mix flour, water, salt and a little yeast, then leave it "
    "covered for twelve to eighteen hours. The long rest develops gluten and flavour on its own; a few "
    "folds during the first two hours are all the kneading it needs.",
    "The printing press did not spread overnight. Gutenberg's workshop in Mainz finished its Bible around "
    "1455, but it took decades for presses to reach most European cities, and centuries before books were "
    "cheap enough for ordinary households.",
)
LONG_DE = (
    "Beim Packen von Trainingsdaten werden mehrere kurze Gespräche zu einer langen Sequenz zusammengefügt. "
    "Damit das Modell nicht über die Grenzen hinweg lernt, braucht jede Sequenz eine Aufmerksamkeitsmaske, "
    "die nur Verbindungen innerhalb eines Gesprächs erlaubt.",
    "Außerdem beginnen die Positions-IDs an jeder Grenze wieder bei null. So sieht das Modell dieselben "
    "Positionen wie beim Training ohne Packen, und die Ergebnisse bleiben vergleichbar.",
    "Zu lange Gespräche sind ein eigenes Problem: Man kann sie verwerfen, abschneiden oder auf mehrere "
    "Puffer verteilen. Jede Entscheidung hat Vor- und Nachteile, und man sollte sie im Bericht festhalten.",
    "Auch die Labels verdienen Aufmerksamkeit. Nur die Antworten des Assistenten sollen zum Verlust beitragen, "
    "und das erste Token eines Gesprächs darf nicht aus dem letzten Token des vorherigen vorhergesagt werden. "
    "Deshalb setzt man das Label an jeder Grenze auf -100.",
    "Ob ein Packer korrekt arbeitet, lässt sich einfach prüfen: Man setzt die ursprünglichen Gespräche aus "
    "den gepackten Puffern wieder zusammen und vergleicht sie Byte für Byte mit der Eingabe. Stimmt alles "
    "überein und überschreitet keine Aufmerksamkeitskante eine Grenze, ist das Ergebnis richtig.",
)
LONG_ZH = (
    "序列打包的基本想法很简单：大多数对话都比上下文窗口短得多。如果每个样本都填充到窗口长度，显卡的大部分时间都在计算没有意义的填充符号。"
    "打包的做法是把几段对话拼接到同一个缓冲区里，并记录每段对话的起点和终点。",
    "这些边界信息非常重要，因为注意力不能跨越对话的边界。使用稠密掩码时，需要一个分块对角的因果掩码；使用变长注意力内核时，则需要传入累计序列长度。"
    "每段对话的位置编号都要从零重新开始。",
    "标签也需要同样小心。只有助手的回复应该参与损失计算，而且一段对话的第一个词元不能由上一段对话的最后一个词元来预测。"
    "实践中，边界处的标签会被设为负一百，也就是忽略索引。",
    "选择哪些对话放在一起，本质上是一个装箱问题。首次适应递减算法先按长度从长到短排序，再把每段对话放进第一个还有空间的缓冲区；"
    "最佳适应递减算法则选择剩余空间最小但仍然放得下的缓冲区。两种方法都很快，浪费的词元通常只有百分之几。",
    "检查打包结果是否正确，有一个简单的办法：从打包后的缓冲区中把原来的对话重新拼出来，逐字节与输入比较。"
    "如果完全一致，而且没有任何注意力连接跨越边界，那么无论用的是哪种策略，打包都是正确的。",
)
PACKER_CODE = '''```python
def first_fit_decreasing(lengths: list[int], capacity: int) -> list[list[int]]:
    """Return, for each bin, the indices of the sequences placed in it."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    bins: list[list[int]] = []
    used: list[int] = []
    for i in order:
        for b, room in enumerate(used):
            if room + lengths[i] <= capacity:
                bins[b].append(i)
                used[b] += lengths[i]
                break
        else:
            bins.append([i])
            used.append(lengths[i])
    return bins
```'''


def _nfd_threads() -> tuple:
    """THREADS with the Vietnamese thread decomposed, so combining marks reach the files."""
    return tuple(
        (lang, tuple((unicodedata.normalize("NFD", q), unicodedata.normalize("NFD", a)) for q, a in ex))
        if lang == "vi" else (lang, ex)
        for lang, ex in THREADS
    )


def _msg(role: str, content) -> dict:
    return {"role": role, "content": content}


def _chat(*exchanges: tuple[str, str], system: str | None = None) -> list[dict]:
    messages = [_msg("system", system)] if system is not None else []
    for user, assistant in exchanges:
        messages += [_msg("user", user), _msg("assistant", assistant)]
    return messages


def edge_conversations() -> list[list[dict]]:
    """Conversations every OpenAI-format fixture must contain, in a fixed order."""
    parts = lambda *texts: [{"type": "text", "text": t} for t in texts]  # noqa: E731
    return [
        # content that looks like, or is, special-token text
        _chat(("My fine-tuned model keeps printing \"<|im_\" at the end of answers. Why?",
               "That fragment means the model never learned to emit the whole end-of-turn token: it was "
               "tokenized as plain text during training, or masked out of the loss. Check that the template "
               "adds the special token and that its label is not -100.")),
        _chat(("Parse this log line: `[worker-3] <|im_start|assistant …truncated`",
               "The chat marker is cut in half: `<|im_start|` lacks its closing `>`, so it is plain text, "
               "not a special token. The line was probably truncated at a byte limit.")),
        _chat(("Is `<|endoftext|>` the same as `<|im_end|>`?",
               "No. `<|im_end|>` closes one chat turn; `<|endoftext|>` ends a whole document and is often "
               "used as padding. A ChatML model should stop generating at `<|im_end|>`."),
              system="You are a helpful assistant."),
        _chat(("What does <s> mean in a tokenizer?",
               "<s> is a common beginning-of-sequence (BOS) token; </s> often ends the sequence.")),
        # list-of-parts content
        _chat((parts("Summarize in one line: the meeting moved to Thursday."), "The meeting is now on Thursday.")),
        _chat((parts("Here is a sentence: ", "\"Der Hund schläft.\" Translate it."), "\"The dog is sleeping.\"")),
        [_msg("system", parts("You answer in French.")), _msg("user", "How are you?"),
         _msg("assistant", parts("Je vais bien, merci !"))],
        # leading newlines, trailing whitespace, CRLF, tabs, U+2028
        _chat(("\nHello? Is this thing on?", "\nYes, I can read you. How can I help?")),
        _chat(("List three primes.", "\n\n2, 3 and 5.\n"), ("Three more, please.   ", "7, 11, 13  ")),
        _chat(("Why doesn't my CSV split right?\r\nname,age\r\nAda,36\r\n",
               "Your file uses Windows line endings (\\r\\n). Open it with `newline=''` in Python's csv module.")),
        _chat(("Indent this with tabs:\nif x:\nreturn 1", "if x:\n\treturn 1")),
        _chat(("Why does my line-based reader split \"first\u2028second\"?",
               "U+2028 is LINE SEPARATOR. JSON allows it raw inside strings, but str.splitlines() treats it "
               "as a line break. Split JSONL on \\n only.")),
        # tiny
        _chat(("hi", "Hello! 👋")),
        _chat(("?", "How can I help?")),
        _chat(("ok", "👍")),
        # long: 1–3k characters in one message
        _chat(("Can you explain sequence packing in detail, from padding to labels?", "\n\n".join(LONG_EN[:6]))),
        _chat(("Write a long essay that mixes everything you know about packing, bread and printing.",
               "\n\n".join(LONG_EN)), system=SYSTEM_PROMPTS["en"][2]),
        _chat(("Show me a first-fit-decreasing packer in Python and explain the trade-offs.",
               PACKER_CODE + "\n\n" + "\n\n".join(LONG_EN[3:7]))),
        _chat(("Summarize these notes in two sentences:\n\n" + "\n\n".join(LONG_EN[6:9] + LONG_EN[:2]),
               "Packing must keep conversations apart and can be checked by rebuilding them; the notes also "
               "cover slow-rising bread and the spread of printing.")),
        _chat(("Erkläre mir bitte ausführlich, wie das Packen von Trainingsdaten funktioniert.",
               "\n\n".join(LONG_DE)), system=SYSTEM_PROMPTS["de"][0]),
        _chat(("请详细解释一下序列打包。", "\n\n".join(LONG_ZH)), system=SYSTEM_PROMPTS["zh"][0]),
    ]


def _random_conversation(rng: random.Random, threads: tuple) -> list[dict]:
    """One conversation: a prefix of a random thread, sometimes with a system prompt or small twists."""
    lang, exchanges = rng.choice(threads)
    exchanges = list(exchanges[: rng.randint(1, len(exchanges))] if rng.random() < 0.5 else exchanges)
    system = None
    if rng.random() < 0.4:
        pool = SYSTEM_PROMPTS.get(lang) if rng.random() < 0.7 else None
        system = rng.choice(pool or SYSTEM_PROMPTS["en"])
    if rng.random() < 0.05:
        user, assistant = exchanges[-1]
        exchanges[-1] = ("\n" + user, assistant)
    if rng.random() < 0.15:
        user, assistant = exchanges[0]
        exchanges[0] = (rng.choice(("Quick question: ", "Hey! ", "Hi, ", "Bitte: ", "Svp, ")) + user, assistant)
    messages = _chat(*exchanges, system=system)
    if rng.random() < 0.08:
        messages[-1] = _msg("assistant", messages[-1]["content"] + rng.choice((" 🙂", " ✅", " 🚀", "\n\n🇪🇺")))
    if rng.random() < 0.1:
        i = rng.randrange(len(messages))
        messages[i] = _msg(messages[i]["role"], [{"type": "text", "text": messages[i]["content"]}])
    return messages


def _conversations(rng: random.Random, n: int, *, first: list, exclude: set[str] = frozenset()) -> list:
    """`first`, then random conversations until n, all distinct and none in `exclude`; then shuffled."""
    threads = _nfd_threads()
    out, seen = [], set(exclude)
    for conv in first:
        seen.add(json.dumps(conv, ensure_ascii=False))
        out.append(conv)
    while len(out) < n:
        conv = _random_conversation(rng, threads)
        key = json.dumps(conv, ensure_ascii=False)
        if key not in seen:
            seen.add(key)
            out.append(conv)
    rng.shuffle(out)
    return out


def openai_records(n: int = 120) -> list[dict]:
    return [{"messages": m} for m in _conversations(random.Random(0), n, first=edge_conversations())]


def openai_gz_records(n: int = 20) -> list[dict]:
    exclude = {json.dumps(r["messages"], ensure_ascii=False) for r in openai_records()}
    return [{"messages": m} for m in _conversations(random.Random(4), n, first=[], exclude=exclude)]


def _text_of(content) -> str:
    return content if isinstance(content, str) else "".join(part["text"] for part in content)


def sharegpt_records(n: int = 60) -> list[dict]:
    """ShareGPT records; the i-th uses USER_ALIASES[i % 2] and ASSISTANT_ALIASES[i % 5]."""
    edges = [c for c in edge_conversations() if all(isinstance(m["content"], str) for m in c)]
    convs = _conversations(random.Random(1), n, first=edges[::2])
    records = []
    for i, conv in enumerate(convs):
        names = {"system": "system", "user": USER_ALIASES[i % 2], "assistant": ASSISTANT_ALIASES[i % 5]}
        records.append({"conversations": [{"from": names[m["role"]], "value": _text_of(m["content"])} for m in conv]})
    return records


def prompt_completion_records(n: int = 40) -> list[dict]:
    """Single exchanges; some in a `Question: ... Answer:` style with a completion that starts with a space."""
    rng = random.Random(2)
    pairs = [ex for _, exchanges in _nfd_threads() for ex in exchanges]
    pairs += [(c[0]["content"], c[1]["content"]) for c in edge_conversations()
              if len(c) == 2 and isinstance(c[0]["content"], str) and isinstance(c[1]["content"], str)]
    rng.shuffle(pairs)
    records = []
    for prompt, completion in pairs[:n]:
        if rng.random() < 0.3:
            prompt, completion = f"Question: {prompt}\nAnswer:", " " + completion
        records.append({"prompt": prompt, "completion": completion})
    return records


def text_records(n: int = 40) -> list[dict]:
    """Plain documents: essays of 1-3k characters, single paragraphs, code, tiny lines; shuffled."""
    rng = random.Random(3)
    docs = ["\n\n".join(LONG_EN), "\n\n".join(LONG_EN[:7]), "\n\n".join(LONG_DE), "\n\n".join(LONG_ZH),
            PACKER_CODE, "Hi.", "🙂", "e\u0301te\u0301 (NFD)", "x", "\nStarts with a newline.", "Ends with spaces.  "]
    pool = list(LONG_EN + LONG_DE + LONG_ZH) + [a for _, exchanges in _nfd_threads() for _, a in exchanges]
    docs += rng.sample(pool, n - len(docs))
    rng.shuffle(docs)
    return [{"text": d} for d in docs]


# --- broken.jsonl ---------------------------------------------------------------------------------
def _valid_lines() -> list[bytes]:
    convs = _conversations(random.Random(5), 11, first=[])
    return [json.dumps({"messages": c}, ensure_ascii=False).encode("utf-8") for c in convs]


BAD_LINES = (  # (kind, line bytes, what is wrong) in file order, interleaved with valid lines
    ("malformed_json", b'{"messages": [{"role": "user", "content": "Is this line cut off?"}, {"role": "assis',
     "not valid JSON (truncated line)"),
    ("not_an_object", b'[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]',
     "a JSON array, not an object"),
    ("missing_keys", b'{"foo": 1}', "no messages / conversations / prompt / text key"),
    ("blank_line", b"", "empty line: skip silently, not an error"),
    ("empty_messages", b'{"messages": []}', "messages list is empty"),
    ("unknown_role", b'{"messages": [{"role": "wizard", "content": "I cast a spell."}, '
     b'{"role": "assistant", "content": "Nothing happens."}]}', "role \"wizard\""),
    ("non_string_content", b'{"messages": [{"role": "user", "content": 42}, '
     b'{"role": "assistant", "content": "42 is not text."}]}', "content is the number 42"),
    ("invalid_utf8", b'{"messages": [{"role": "user", "content": "caf\xff\xfe au lait"}, '
     b'{"role": "assistant", "content": "ok"}]}', "raw bytes FF FE: not UTF-8 (valid JSON otherwise)"),
    ("no_assistant_turn", b'{"messages": [{"role": "system", "content": "Be brief."}, '
     b'{"role": "user", "content": "Anyone there?"}]}', "no assistant message: nothing to train on"),
    ("empty_assistant_content", b'{"messages": [{"role": "user", "content": "Say nothing."}, '
     b'{"role": "assistant", "content": ""}]}', "assistant content is \"\" (packcli accepts it; tests/test_job_run.py)"),
)


def broken_lines() -> list[tuple[str, bytes, str]]:
    """(kind, bytes, why) per line of broken.jsonl: valid, valid, then bad/valid alternating, valid last."""
    valid = iter(_valid_lines())
    lines = [("valid", next(valid), "valid"), ("valid", next(valid), "valid")]
    for bad in BAD_LINES:
        lines.append(bad)
        if bad[0] != "blank_line":
            lines.append(("valid", next(valid), "valid"))
    return lines


# --- writing --------------------------------------------------------------------------------------
def encode_jsonl(records: list[dict]) -> bytes:
    """One JSON object per line, UTF-8, "\\n" after every line; every ASCII_EVERY-th line ASCII-escaped."""
    lines = [json.dumps(r, ensure_ascii=(i % ASCII_EVERY == 0)) for i, r in enumerate(records, start=1)]
    return ("\n".join(lines) + "\n").encode("utf-8")


GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # deflate, no name, mtime 0, level 9, OS unknown


def gzip_deterministic(payload: bytes) -> bytes:
    """gzip bytes that depend only on the payload and zlib's deflate (gzip.compress stamps the OS byte)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = compressor.compress(payload) + compressor.flush()
    return GZIP_HEADER + body + struct.pack("<II", zlib.crc32(payload), len(payload) & 0xFFFFFFFF)


def corpus_files() -> dict[str, bytes]:
    """File name -> exact bytes, for every file under fixtures/corpus/."""
    gz_payload = encode_jsonl(openai_gz_records())
    return {
        "openai.jsonl": encode_jsonl(openai_records()),
        "sharegpt.jsonl": encode_jsonl(sharegpt_records()),
        "prompt_completion.jsonl": encode_jsonl(prompt_completion_records()),
        "text.jsonl": encode_jsonl(text_records()),
        # mtime=0 and no file name in the header, so the bytes depend only on the payload (and zlib)
        "openai.jsonl.gz": gzip_deterministic(gz_payload),
        "broken.jsonl": b"".join(line + b"\n" for _, line, _ in broken_lines()),
    }


def write_corpus(out_dir: Path) -> list[Path]:
    """Write every corpus file into `out_dir`; return the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in corpus_files().items():
        (out_dir / name).write_bytes(data)
        paths.append(out_dir / name)
    return paths


# --- the tables in fixtures/README.md -------------------------------------------------------------
def _features(messages: list[dict]) -> set[str]:
    texts = [_text_of(m["content"]) for m in messages]
    joined = "".join(texts)
    found = set()
    if messages[0]["role"] == "system":
        found.add("system message")
    if any(not isinstance(m["content"], str) for m in messages):
        found.add("content as list of parts")
    if sum(m["role"] == "assistant" for m in messages) >= 3:
        found.add("3+ exchanges")
    if any(t.startswith("\n") for t in texts):
        found.add("content starts with \\n")
    if any(tok in joined for tok in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>")):
        found.add("special-token text in content")
    elif "<|" in joined:
        found.add("special-token fragment (\"<|im_\")")
    if max(len(t) for t in texts) >= 1000:
        found.add("message >= 1000 chars")
    if len(joined) <= 20:
        found.add("tiny (<= 20 chars in all)")
    if "\r\n" in joined:
        found.add("CRLF in content")
    if "\u2028" in joined:
        found.add("U+2028 in content")
    if any(unicodedata.combining(b) and unicodedata.name(a, "").startswith("LATIN") for a, b in zip(joined, joined[1:])):
        found.add("combining marks (Latin)")
    if any(ord(c) > 0xFFFF for c in joined):
        found.add("non-BMP (emoji)")
    if any("\u0590" <= c <= "\u06ff" for c in joined):
        found.add("right-to-left script")
    if any("\u3040" <= c <= "\u9fff" or "\uac00" <= c <= "\ud7af" for c in joined):
        found.add("CJK / kana / hangul")
    return found


def readme_tables() -> str:
    """Markdown: which openai.jsonl lines carry which edge case, and what each broken.jsonl line is."""
    index: dict[str, list[int]] = {}
    for line_no, record in enumerate(openai_records(), start=1):
        for feature in _features(record["messages"]):
            index.setdefault(feature, []).append(line_no)
    index["ASCII-escaped line (ensure_ascii)"] = list(range(ASCII_EVERY, len(openai_records()) + 1, ASCII_EVERY))
    out = ["| openai.jsonl feature | lines |", "|---|---|"]
    cell = lambda text: text.replace("|", "\\|")  # noqa: E731  (a "|" inside a cell ends it)
    out += [f"| {cell(feature)} | {', '.join(map(str, lines))} |" for feature, lines in sorted(index.items())]
    out += ["", "| broken.jsonl line | kind | what |", "|---|---|---|"]
    out += [f"| {n} | {kind} | {cell(why)} |" for n, (kind, _, why) in enumerate(broken_lines(), start=1)]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: %(default)s)")
    parser.add_argument("--readme-tables", action="store_true", help="print the fixtures/README.md tables only")
    args = parser.parse_args(argv)
    if args.readme_tables:
        sys.stdout.write(readme_tables())
        return 0
    for path in write_corpus(args.out):
        data = path.read_bytes()
        payload = gzip.decompress(data) if path.suffix == ".gz" else data
        lines = payload.count(b"\n")
        print(f"{path.name:<24} {lines:>4} lines {len(data):>7} bytes  "
              f"sha256 {hashlib.sha256(data).hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
