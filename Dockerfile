FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY nodus ./nodus
COPY migrations ./migrations
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
RUN useradd --system --uid 10001 nodus
COPY --from=build /install /usr/local
# Alembic reads migrations from beside the installed package (see nodus/storage/database.py).
COPY migrations /usr/local/lib/python3.11/site-packages/migrations
USER 10001
ENTRYPOINT ["nodus"]
CMD ["apiserver"]
