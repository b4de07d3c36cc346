# A fixed Python with the 2025 tarfile fixes (3.12.11+); Nodus's own unpacking uses tarfile only to parse headers
# (ADR 0031), but the interpreter is pinned so that a rebuild never moves it silently.
FROM python:3.12.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY nodus ./nodus
COPY migrations ./migrations
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.12.11-slim
RUN useradd --system --uid 10001 nodus
COPY --from=build /install /usr/local
# Alembic reads migrations from beside the installed package (see nodus/storage/database.py).
COPY migrations /usr/local/lib/python3.12/site-packages/migrations
USER 10001
ENTRYPOINT ["nodus"]
CMD ["apiserver"]
