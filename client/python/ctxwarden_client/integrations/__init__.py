"""Drop-in adapters that put ctxwarden behind agent frameworks' own memory interfaces.

Each module needs its framework (the client's extras admit the tested versions and
later ones up to the next that may break the adapter):

- :mod:`ctxwarden_client.integrations.openai_agents` (``ctxwarden-client[openai-agents]``):
  ``CtxwardenSession``, an OpenAI Agents SDK session with compaction.
- :mod:`ctxwarden_client.integrations.adk` (``ctxwarden-client[adk]``):
  ``CtxwardenSessionService``, a Google ADK session service, and
  :mod:`ctxwarden_client.integrations.adk_context`: ``CtxwardenContextPlugin``, the ADK
  plugin that sends the model ctxwarden's effective context (compaction included).
- :mod:`ctxwarden_client.integrations.langchain` (``ctxwarden-client[langchain]``):
  ``CtxwardenChatMessageHistory`` and ``CtxwardenContextMiddleware``.
- :mod:`ctxwarden_client.integrations.langgraph` (``ctxwarden-client[langgraph]``):
  ``CtxwardenStore``, a LangGraph ``BaseStore`` over ctxwarden's memories.

:mod:`ctxwarden_client.integrations.session_ids` (no framework needed) maps a
framework's identifiers into one ctxwarden session ID and back.
"""
