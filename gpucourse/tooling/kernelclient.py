"""A bounded Jupyter kernel client over a single-user server's websocket (what JupyterLab's browser does).

Used by ``make loadtest`` and the hub fault tests: execute cells and collect their outputs, and move a
widget the way JupyterLab does (a ``comm_msg`` with ``method: update`` to the slider's model), then
wait for the kernel's own answer. Every wait has a deadline; nothing here loops without one.
"""

from __future__ import annotations

import json
import time
import uuid

import websocket  # websocket-client, in the course's locks (jupyter_server depends on it)


class KernelTimeout(TimeoutError):
    pass


class KernelClient:
    def __init__(self, url: str, token: str, kernel_id: str, *, connect_timeout_s: float = 60.0):
        ws_url = url.replace("http://", "ws://", 1) + f"/api/kernels/{kernel_id}/channels"
        self.session = uuid.uuid4().hex
        self.ws = websocket.create_connection(ws_url, header=[f"Authorization: token {token}"],
                                              timeout=connect_timeout_s, suppress_origin=True)
        self.comms: dict[str, dict] = {}  # every widget model the kernel opened, with its latest state
        self.listeners: list = []

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:  # noqa: BLE001 - closing a socket that is already gone
            pass

    def _message(self, channel: str, msg_type: str, content: dict) -> dict:
        header = {"msg_id": uuid.uuid4().hex, "username": "learner", "session": self.session,
                  "msg_type": msg_type, "version": "5.3", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        return {"header": header, "parent_header": {}, "metadata": {}, "content": content, "channel": channel,
                "buffers": []}

    def send(self, channel: str, msg_type: str, content: dict) -> str:
        message = self._message(channel, msg_type, content)
        self.ws.send(json.dumps(message))
        return message["header"]["msg_id"]

    def receive(self, deadline: float) -> dict:
        left = deadline - time.monotonic()
        if left <= 0:
            raise KernelTimeout("no answer from the kernel before the deadline")
        self.ws.settimeout(left)
        try:
            frame = self.ws.recv()
        except websocket.WebSocketTimeoutException as error:
            raise KernelTimeout("no answer from the kernel before the deadline") from error
        if isinstance(frame, bytes):  # a binary frame (buffers): the JSON part is not needed here
            return {}
        message = json.loads(frame)
        self._track_comms(message)
        return message

    def _track_comms(self, message: dict) -> None:
        kind = message.get("msg_type") or message.get("header", {}).get("msg_type")
        content = message.get("content", {})
        if kind == "comm_open":
            self.comms[content["comm_id"]] = dict(content.get("data", {}).get("state", {}))
        elif kind == "comm_msg" and content.get("comm_id") in self.comms:
            data = content.get("data", {})
            if data.get("method") in ("update", "echo_update"):
                self.comms[content["comm_id"]].update(data.get("state", {}))
        for listener in self.listeners:
            listener(message)

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """kernel_info until the kernel answers (a kernel that is still importing answers late)."""
        deadline = time.monotonic() + timeout_s
        msg_id = self.send("shell", "kernel_info_request", {})
        while True:
            message = self.receive(deadline)
            if message.get("parent_header", {}).get("msg_id") == msg_id and \
                    message.get("msg_type") == "kernel_info_reply":
                return

    def execute(self, code: str, timeout_s: float = 300.0) -> tuple[dict, list[dict]]:
        """Run ``code``; returns the execute_reply's content and the cell's outputs (nbformat dicts)."""
        deadline = time.monotonic() + timeout_s
        msg_id = self.send("shell", "execute_request", {"code": code, "silent": False, "store_history": True,
                                                        "user_expressions": {}, "allow_stdin": False,
                                                        "stop_on_error": True})
        outputs: list[dict] = []
        reply, idle = None, False
        while reply is None or not idle:
            message = self.receive(deadline)
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = message.get("msg_type"), message.get("content", {})
            if kind == "execute_reply":
                reply = content
            elif kind == "status" and content.get("execution_state") == "idle":
                idle = True
            elif kind == "stream":
                outputs.append({"output_type": "stream", "name": content["name"], "text": content["text"]})
            elif kind in ("display_data", "execute_result"):
                output = {"output_type": kind, "data": content.get("data", {}), "metadata": content.get("metadata", {})}
                if kind == "execute_result":
                    output["execution_count"] = content.get("execution_count")
                outputs.append(output)
            elif kind == "error":
                outputs.append({"output_type": "error", "ename": content["ename"], "evalue": content["evalue"],
                                "traceback": content.get("traceback", [])})
        return reply, outputs

    # -- widgets ---------------------------------------------------------------------------------------
    def livecharts(self) -> list[str]:
        """The model ids of the course's LiveCharts (VBoxes with the class gpucourse-livechart), in order."""
        return [cid for cid, state in self.comms.items() if "gpucourse-livechart" in state.get("_dom_classes", [])]

    def _children(self, model_id: str) -> list[str]:
        return [c.removeprefix("IPY_MODEL_") for c in self.comms.get(model_id, {}).get("children", [])]

    def livechart_parts(self, chart_id: str) -> tuple[dict[str, str], str]:
        """The chart's sliders (description → model id) and its status line's model id."""
        sliders, status = {}, None
        for child in self._children(chart_id):
            grandchildren = self._children(child)
            for grandchild in grandchildren:
                state = self.comms.get(grandchild, {})
                if state.get("_model_name", "").endswith(("SliderModel", "DropdownModel")):
                    sliders[state.get("description", grandchild)] = grandchild
            if len(grandchildren) == 2 and self.comms.get(grandchildren[1], {}).get("_model_name") == \
                    "FloatProgressModel":
                status = grandchildren[0]
        if status is None:
            raise LookupError("this LiveChart has no status line")
        return sliders, status

    def move(self, slider_id: str, status_id: str, value, timeout_s: float = 120.0) -> tuple[float, str]:
        """Set the slider as JupyterLab does when the learner lets go of it, and wait for the chart's status
        line to count one more finished run (``data-runs``) or error. Returns (seconds, status html)."""
        import re

        def counts(html: str) -> tuple[int, int]:
            runs = re.search(r'data-runs="(\d+)"', html or "")
            errors = re.search(r'data-errors="(\d+)"', html or "")
            return (int(runs.group(1)) if runs else 0, int(errors.group(1)) if errors else 0)

        before = counts(self.comms[status_id].get("value", ""))
        started = time.monotonic()
        deadline = started + timeout_s
        self.send("shell", "comm_msg", {"comm_id": slider_id, "data": {"method": "update", "state": {"value": value},
                                                                       "buffer_paths": []}})
        while True:
            self.receive(deadline)
            now = counts(self.comms[status_id].get("value", ""))
            if now[0] > before[0] or now[1] > before[1]:
                return time.monotonic() - started, self.comms[status_id].get("value", "")
